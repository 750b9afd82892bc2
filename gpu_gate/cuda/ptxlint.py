"""Races that compute-sanitizer cannot see, read from the compiled code.

racecheck watches shared memory inside one block. Two patterns that corrupt results through
global memory, only when many programs contend, are visible in the PTX of any build, whatever
the timing:

- ``lock-release-without-barrier``: a spin lock released by an atomic exchange (to 0) after the
  block's global stores with no block barrier between them. Only one thread releases; the other
  threads' stores may still be in flight when the next program takes the lock. (Triton 3.6
  compiles ``tl.atomic_xchg(lock, 0)`` right after the ``st.global``s unless the kernel has a
  ``tl.debug_barrier()``; nvcc puts nothing between a block's stores and ``atomicExch``.)
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

_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.?entry\s+([\w$]+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+(?:.*inlined_at\s+(\d+)\s+(\d+)\s+\d+)?")
_INSN = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s*(.*?);")
_REG = re.compile(r"%[\w]+")
_BARRIER = re.compile(r"^(?:bar|barrier)\.(?!warp)")


@dataclasses.dataclass(frozen=True)
class Hit:
    kind: str  # "lock-release-without-barrier" | "global-scatter-without-atomics"
    kernel: str
    file: str | None
    line: int | None
    excerpt: str  # the PTX from the store to the release (or the load and the store)

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
        if reg in loaded and d.op.startswith("ld.") and ".global" in d.op:
            return True
        if d.op.startswith("ld."):
            continue  # a parameter or another state space
        todo += [r for op in d.operands[1:] for r in _REG.findall(op)]
    return False
