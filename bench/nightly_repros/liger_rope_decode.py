"""Standalone: Liger-Kernel's rotary on one token per sequence (decoding), q and k contiguous as (batch, heads, 1, head_dim).

    PYTHONPATH=<Liger-Kernel>/src python liger_rope_decode.py          # on a GPU
    TRITON_INTERPRET=1 PYTHONPATH=<Liger-Kernel>/src python liger_rope_decode.py cpu

Plain torch and liger_kernel, no gpu-gate. ``rope_forward`` transposes q to (batch, seq, heads, head_dim);
with seq == 1 and q contiguous that view is contiguous too, so nothing is copied and the kernel works in
place, stepping from one token's row to the next by ``q.stride(1)``: the stride of the size-1 seq dim,
which here is head_dim, not heads x head_dim. Each program then rotates the wrong rows (some twice, some
never), and on a GPU programs overlap (the result differs from run to run). With seq > 1, or q handed
over as a transposed view of (batch, seq, heads, head_dim), the copy or the stride is right."""
import sys

import torch
from liger_kernel.ops.rope import LigerRopeFunction

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"


def cos_sin(pos, hd):
    e = torch.arange(0, hd, 2, dtype=torch.float64, device=dev) / hd
    a = pos[..., None].double() / 10000.0 ** e
    both = torch.cat([a, a], dim=-1)
    return both.cos(), both.sin()


def rot(x, cos, sin):
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], dim=-1) * sin


torch.manual_seed(0)
for batch, qh, kh, seq, hd in [(2, 4, 1, 1, 16), (8, 32, 8, 1, 128), (8, 32, 8, 2, 128), (1, 32, 8, 1, 128)]:
    for layout in ("contiguous (b, h, s, d)", "view of (b, s, h, d)"):
        q0 = torch.randn(batch, qh, seq, hd, device=dev)
        k0 = torch.randn(batch, kh, seq, hd, device=dev)
        pos = torch.randint(0, 4096, (batch, seq), device=dev)
        c64, s64 = cos_sin(pos, hd)
        outs = []
        for _ in range(5):
            if layout.startswith("contiguous"):
                q, k = q0.clone(), k0.clone()
            else:
                # the projections' layout: (b, s, h, d) memory, seen as (b, h, s, d)
                q = q0.transpose(1, 2).clone(memory_format=torch.contiguous_format).transpose(1, 2)
                k = k0.transpose(1, 2).clone(memory_format=torch.contiguous_format).transpose(1, 2)
            qo, ko = LigerRopeFunction.apply(q, k, c64.float(), s64.float())
            outs.append((qo.clone(), ko.clone()))
        tq, tk = rot(q0.double(), c64.unsqueeze(1), s64.unsqueeze(1)), rot(k0.double(), c64.unsqueeze(1), s64.unsqueeze(1))
        err = max((outs[0][0].double() - tq).abs().max().item(), (outs[0][1].double() - tk).abs().max().item())
        differ = sum(not all(torch.equal(a, b) for a, b in zip(outs[0], o)) for o in outs[1:])
        print(f"batch={batch} q_heads={qh} kv_heads={kh} seq={seq} head_dim={hd} {layout}: max error {err:.3g}, "
              f"{differ}/4 reruns differ")
