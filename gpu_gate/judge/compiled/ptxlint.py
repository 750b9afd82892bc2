"""Races that compute-sanitizer cannot see, read from the compiled code.

racecheck watches shared memory inside one block. Two patterns that corrupt results through
global memory, only when many programs contend, are visible in the PTX of any build, whatever
the timing:

- ``lock-release-without-barrier``: a spin lock released by an atomic exchange (to 0) after the
  block's global stores with no block barrier between them. Only one thread releases; the other
  threads' stores may still be in flight when the next program takes the lock. (Triton 3.6
  compiles ``tl.atomic_xchg(lock, 0)`` right after the ``st.global``s unless the kernel has a
  ``tl.debug_barrier()``; nvcc puts nothing between a block's stores and ``atomicExch``.)
- the same kind for a flag: a store (or an atomic exchange) to memory that the kernel's programs
  poll in a loop (``ld.volatile``/``ld.acquire``/an atomic on the same parameter's buffer, inside a
  loop), after the block's global stores with no block barrier between them; a flag written
  without release semantics (a plain store, a relaxed exchange) needs a fence (``membar``/``fence``)
  after the stores as well. The programs that see the flag may
  read the partial results before they land (a split-K or "last block" reduction, a stream-K
  fix-up, a producer/consumer queue).
- ``global-scatter-without-atomics``: a plain load and store of the same global address computed
  from a value loaded from global memory (an index): two programs with the same index lose one
  update. A note: the determinism check is where it shows, with Zipf-skewed indices.

The scan is linear in program order within each kernel: a barrier on any path between the two
counts, so it errs towards silence, never towards a false alarm from control flow. Source lines
come from ``.loc`` directives (compile with ``-lineinfo``); for inlined code, the outermost
call site in the user's file.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.?entry\s+([\w$]+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+(?:.*inlined_at\s+(\d+)\s+(\d+)\s+\d+)?")
_INSN = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s*(.*?);")
_REG = re.compile(r"%[\w]+")
_BARRIER = re.compile(r"^(?:bar|barrier)\.(?!warp)")
_FENCE = re.compile(r"^(?:membar|fence)\.")
_LABEL = re.compile(r"^\s*([$\w]+):")
_BRANCH = re.compile(r"^\s*(?:@!?%\w+\s+)?bra(?:\.uni)?\s+([$\w]+)\s*;")


@dataclasses.dataclass(frozen=True)
class Hit:
    kind: str  # "lock-release-without-barrier" | "global-scatter-without-atomics" | "int32-offset"
    kernel: str
    file: str | None
    line: int | None
    excerpt: str  # the PTX from the store to the release (or the load and the store)
    flag: bool = False  # a flag that other programs poll, not a lock
    barrier: bool = False  # (a flag) a block barrier came between the stores and the flag
    fence: bool = True  # (a flag) a fence came between them, or the flag store releases by itself
    product_line: int | None = None  # (a 32-bit offset) the line of the product, where not the address's

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.file and self.line else self.kernel


@dataclasses.dataclass
class _Insn:
    op: str
    args: str
    text: str
    loc: tuple[int, int] | None  # (file number, line)

    @property
    def operands(self) -> list[str]:
        return [a.strip() for a in _split(self.args)]


# What other readers of PTX share with this one (:mod:`.ptx_offsets`).
Insn = _Insn


def _split(args: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur] if cur.strip() else out


def _kernels(ptx: str) -> tuple[dict[int, str], dict[str, list[_Insn]]]:
    files: dict[int, str] = {}
    kernels: dict[str, list[_Insn]] = {}
    current: list[_Insn] | None = None
    loc: tuple[int, int] | None = None
    for raw in ptx.splitlines():
        line = raw.split("//", 1)[0]
        if m := _FILE.match(line):
            files[int(m.group(1))] = m.group(2)
        elif m := _ENTRY.match(line):
            current = kernels.setdefault(m.group(1), [])
            loc = None
        elif current is None:
            continue
        elif m := _LOC.match(line):
            loc = (int(m.group(3)), int(m.group(4))) if m.group(3) else (int(m.group(1)), int(m.group(2)))
        elif m := _LABEL.match(line):
            current.append(_Insn(":label", m.group(1), raw.strip(), loc))
        elif m := _INSN.match(line):
            current.append(_Insn(m.group(1), m.group(2), raw.strip(), loc))
    return files, kernels


def _is_global_store(i: _Insn) -> bool:
    """``st.global``, or a generic ``st`` (which may reach global memory)."""
    return i.op.startswith("st.") and not any(s in i.op for s in (".shared", ".local", ".param"))


def _is_release(i: _Insn, consts: dict[str, str]) -> bool:
    if not (i.op.startswith("atom.") and ".exch" in i.op and ".shared" not in i.op):
        return False
    ops = i.operands
    value = ops[-1] if ops else ""
    return consts.get(value, value) in ("0", "0x0", "0x00000000")


def _constants(insns: list[_Insn]) -> dict[str, str]:
    consts: dict[str, str] = {}
    for i in insns:
        ops = i.operands
        if i.op.startswith("mov.") and len(ops) == 2 and not ops[1].startswith("%"):
            consts[ops[0]] = ops[1]
    return consts


def lint(ptx: str) -> list[Hit]:
    """Both checks over every kernel of one PTX module."""
    files, kernels = _kernels(ptx)
    hits: list[Hit] = []
    for name, insns in kernels.items():
        hits += _lock_releases(name, insns, files)
        hits += _flag_releases(name, insns, files)
        hits += _scatters(name, insns, files)
    return hits


def _where(i: _Insn, files: dict[int, str]) -> tuple[str | None, int | None]:
    if i.loc is None:
        return None, None
    return files.get(i.loc[0]), i.loc[1]


def _lock_releases(name: str, insns: list[_Insn], files: dict[int, str]) -> list[Hit]:
    consts = _constants(insns)
    hits = []
    last_store: int | None = None
    for n, i in enumerate(insns):
        if _BARRIER.match(i.op):
            last_store = None
        elif _is_release(i, consts):
            if last_store is not None:
                file, line = _where(i, files)
                excerpt = "\n".join(x.text for x in insns[last_store:n + 1])
                hits.append(Hit("lock-release-without-barrier", name, file, line, excerpt))
            last_store = None
        elif _is_global_store(i):
            last_store = n
    return hits


def _loops(insns: list[_Insn]) -> list[tuple[int, int]]:
    """(label, branch) index pairs of the backward branches: the loops, in program order."""
    labels = {i.args: n for n, i in enumerate(insns) if i.op == ":label"}
    out = []
    for n, i in enumerate(insns):
        if i.op.startswith("bra") and (m := _BRANCH.match(i.text)) and labels.get(m.group(1), n + 1) < n:
            out.append((labels[m.group(1)], n))
    return out


def _origins(regs: list[str], defs: dict[str, _Insn]) -> Iterator[tuple[str, _Insn]]:
    """The loads that registers are computed from, walking back through their definitions (each
    register once): (the loaded register, its load). A load is where a walk stops: what it read
    is a value, not an address computed from the registers before it."""
    return ((reg, d) for reg, d in behind(regs, defs) if d.op.startswith("ld."))


def behind(regs: list[str], defs: dict[str, _Insn], stop: tuple[str, ...] = ("ld.",)
           ) -> Iterator[tuple[str, _Insn]]:
    """Every definition that registers are computed from, walking back (each register once):
    (the register, the instruction that defines it). An instruction whose op starts with one of
    ``stop`` (a load: what it read is a value) ends its branch of the walk."""
    seen: set[str] = set()
    todo = list(regs)
    while todo:
        reg = todo.pop()
        if reg in seen:
            continue
        seen.add(reg)
        d = defs.get(reg)
        if d is None:
            continue
        yield reg, d
        if not d.op.startswith(stop):
            todo += [r for op in d.operands[1:] for r in _REG.findall(op)]


def _params(reg_or_addr: str, defs: dict[str, _Insn]) -> set[str]:
    """The kernel parameters an address (a register, or ``[%rd + 4]``) is computed from (not a
    value loaded from memory: an index is not where the buffer is)."""
    return {name for _, d in _origins(_REG.findall(reg_or_addr), defs) if d.op.startswith("ld.param")
            for name in re.findall(r"\[\s*([\w$]+)", d.operands[-1])}


def _address(i: _Insn) -> str | None:
    """The address operand of a store, load or atomic."""
    ops = i.operands
    if i.op.startswith(("st.", "red.")):
        return ops[0] if ops else None
    if i.op.startswith(("ld.", "atom.")):
        return ops[1] if len(ops) > 1 else None
    return None


def _is_poll(i: _Insn) -> bool:
    if ".shared" in i.op or ".local" in i.op or ".param" in i.op or ".const" in i.op:
        return False
    return (i.op.startswith("ld.") and any(s in i.op for s in (".volatile", ".acquire", ".relaxed"))) \
        or i.op.startswith("atom.")


def _flag_releases(name: str, insns: list[_Insn], files: dict[int, str]) -> list[Hit]:
    defs: dict[str, _Insn] = {}
    for i in insns:
        ops = i.operands
        if ops and ops[0].startswith("%") and not i.op.startswith(("st.", "red.", ":label")):
            for reg in _REG.findall(ops[0]):
                defs.setdefault(reg, i)
    loops = _loops(insns)
    polled: dict[str, list[tuple[int, int]]] = {}  # parameter -> the loops that poll its buffer
    for lo, hi in loops:
        for i in insns[lo:hi]:
            if _is_poll(i) and (addr := _address(i)):
                for p in _params(addr, defs):
                    polled.setdefault(p, []).append((lo, hi))
    if not polled:
        return []
    consts = _constants(insns)
    hits = []
    last_store: int | None = None
    fenced = False
    for n, i in enumerate(insns):
        if _BARRIER.match(i.op):
            last_store = None
            continue
        if _FENCE.match(i.op):
            fenced = True
            continue
        store = _is_global_store(i)
        exch = i.op.startswith("atom.") and ".exch" in i.op and ".shared" not in i.op
        if not (store or exch):
            continue
        addr = _address(i) or ""
        flags = {p for p in _params(addr, defs) if p in polled}
        if not flags:
            last_store, fenced = (n, False) if store else (last_store, fenced)
            continue
        in_poll = any(lo <= n < hi for p in flags for lo, hi in polled[p])
        if in_poll or (exch and _is_release(i, consts)):
            continue  # taking a lock, or releasing one (the lock check's)
        if store and _stores_zero(i, consts):
            continue  # a flag put back down (reset before use): nothing is published by it
        released = ".release" in i.op or ".acq_rel" in i.op  # orders this thread's stores by itself
        if last_store is not None:
            file, line = _where(i, files)
            excerpt = "\n".join(x.text for x in insns[last_store:n + 1] if x.op != ":label")
            hits.append(Hit("lock-release-without-barrier", name, file, line, excerpt, flag=True,
                            fence=released or fenced))
        elif not (released or fenced) and _stored_before(insns, n):
            file, line = _where(i, files)
            hits.append(Hit("lock-release-without-barrier", name, file, line, i.text, flag=True, barrier=True,
                            fence=False))
    return hits


def _stores_zero(i: _Insn, consts: dict[str, str]) -> bool:
    ops = i.operands
    value = ops[-1].strip("{} ") if ops else ""
    return consts.get(value, value) in ("0", "0x0", "0x00000000", "0U")


def _stored_before(insns: list[_Insn], n: int) -> bool:
    return any(_is_global_store(i) for i in insns[:n])


def _scatters(name: str, insns: list[_Insn], files: dict[int, str]) -> list[Hit]:
    defs: dict[str, _Insn] = {}
    loaded: set[str] = set()
    hits = []
    loads: dict[str, int] = {}  # address operand -> index of the plain global load from it
    for n, i in enumerate(insns):
        ops = i.operands
        if i.op.startswith("ld.") and ".global" in i.op and len(ops) >= 2:
            loads[ops[-1].replace(" ", "")] = n
            for reg in _REG.findall(ops[0]):
                loaded.add(reg)
                defs[reg] = i
        elif _is_global_store(i) and not i.op.startswith("atom") and ops:
            addr = ops[0].replace(" ", "")
            at = loads.get(addr)
            if at is not None and _from_loaded(_REG.findall(addr), defs, loaded):
                file, line = _where(i, files)
                hits.append(Hit("global-scatter-without-atomics", name, file, line,
                                "\n".join(x.text for x in insns[at:n + 1])))
        elif ops and ops[0].startswith("%"):
            defs[ops[0]] = i
    return hits


def _from_loaded(regs: list[str], defs: dict[str, _Insn], loaded: set[str]) -> bool:
    """Whether an address register is computed from a value loaded from global memory (not
    from the address of a load: ``ld.global %r, [%rd]`` makes ``%r`` loaded, not ``%rd``)."""
    return any(reg in loaded and ".global" in d.op for reg, d in _origins(regs, defs))


def parse(ptx: str) -> tuple[dict[int, str], dict[str, list[_Insn]]]:
    """The module's source files by number, and each kernel's instructions in program order."""
    return _kernels(ptx)


def source_of(i: _Insn, files: dict[int, str]) -> tuple[str | None, int | None]:
    """The source file and line of an instruction (``.loc``), where the build kept them."""
    return _where(i, files)
