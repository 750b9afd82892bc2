"""A split reduction with ready flags: each program writes its block of partial values and raises
its flag; the first program waits for every flag, then adds the partials up. Raised with a plain
store right after the partials, a waiting program may see the flag before the partials land."""
import triton
import triton.language as tl


@triton.jit
def split_sum_flag_store(X, Partial, Ready, Out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(Partial + offs, tl.load(X + offs, mask=offs < n, other=0.0))
    tl.store(Ready + pid, 1)
    if pid == 0:
        total = tl.zeros((BLOCK,), dtype=tl.float32)
        for b in range(tl.num_programs(0)):
            while tl.load(Ready + b, volatile=True) == 0:
                pass
            total += tl.load(Partial + b * BLOCK + tl.arange(0, BLOCK))
        tl.store(Out, tl.sum(total, axis=0))


@triton.jit
def split_sum_flag_release(X, Partial, Ready, Out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(Partial + offs, tl.load(X + offs, mask=offs < n, other=0.0))
    tl.debug_barrier()
    tl.atomic_xchg(Ready + pid, 1)
    if pid == 0:
        total = tl.zeros((BLOCK,), dtype=tl.float32)
        for b in range(tl.num_programs(0)):
            while tl.load(Ready + b, volatile=True) == 0:
                pass
            total += tl.load(Partial + b * BLOCK + tl.arange(0, BLOCK))
        tl.store(Out, tl.sum(total, axis=0))
