"""Offsets computed in 32 bits that wrap past 2^31 elements, read from the compiled code.

A kernel that multiplies its program's index by a runtime value (a row stride, a column count)
in 32-bit arithmetic, and only then widens the product to a 64-bit address, reads and writes the
right places until ``program index x stride`` reaches 2^31; past that the offset wraps negative
(an illegal address) or onto other rows (silent corruption). Nothing small shows it: the tensors
it takes are over 2^31 elements (4 GiB in bf16), beyond what an equivalence case holds, and
compute-sanitizer sees nothing on smaller ones. Real fixes cast the program index to 64 bits
first (``tl.program_id(0).to(tl.int64)`` in Triton, ``(int64_t)blockIdx.x * stride`` in CUDA).

The pattern, in PTX: a ``mul.lo``/``mad.lo`` on 32-bit registers, one factor computed from
``%ctaid`` (the program index) and the other from a 32-bit kernel parameter (not a constant:
``pid * BLOCK`` overflows only past 2^31 elements in one dimension, and is not reported), whose
product, or a 32-bit value computed from it, is then widened (``mul.wide``, ``mad.wide``,
``cvt`` to 64 bits): an address offset. Triton passes an integer argument in 32 bits when its
value fits, so a stride of 4096 is 32-bit even where rows x 4096 is not.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from .ptxlint import Hit, Insn, behind, parse, source_of

KIND = "int32-offset"
_NARROW_MUL = re.compile(r"^(?:mul|mad)\.lo\.[su]32$")
_WIDEN = re.compile(r"^(?:(?:mul|mad)\.wide\.[su]32|cvt\.[su]64\.[su]32)$")
_NARROW_ARITH = re.compile(r"^(?:add|sub|mul\.lo|mad\.lo|shl|and|or|xor|min|max|neg|selp|mov)\.(?:[su]32|b32)$"
                           r"|^(?:add|sub|mov)\.(?:[su]32|b32)$")
_PARAM32 = re.compile(r"^ld\.param\.[bsu]32$")
_REG = re.compile(r"%[\w]+")


def lint(ptx: str) -> list[Hit]:
    """One hit per source line (or per kernel, without line information) of every kernel: the line
    where the 32-bit product is widened into an address."""
    files, kernels = parse(ptx)
    hits: list[Hit] = []
    for name, insns in kernels.items():
        hits += _narrow_offsets(name, insns, files)
    return hits


def _narrow_offsets(name: str, insns: list[Insn], files: dict[int, str]) -> list[Hit]:
    defs: dict[str, Insn] = {}
    for i in insns:
        ops = i.operands
        if ops and ops[0].startswith("%") and not i.op.startswith(("st.", "red.", "bra", ":")):
            defs.setdefault(ops[0], i)
    uses: dict[str, list[int]] = {}
    for n, i in enumerate(insns):
        for op in i.operands[1:]:
            for reg in _REG.findall(op):
                uses.setdefault(reg, []).append(n)
    hits: list[Hit] = []
    seen: set[tuple[str | None, int | None]] = set()
    for n, i in enumerate(insns):
        if not _NARROW_MUL.match(i.op):
            continue
        ops = i.operands
        if len(ops) < 3:
            continue
        a, b = ops[1], ops[2]
        if not ((_from(a, defs, _is_program_index) and _from(b, defs, _is_param32))
                or (_from(b, defs, _is_program_index) and _from(a, defs, _is_param32))):
            continue
        widened = _widened(ops[0], insns, uses)
        if widened is None:
            continue
        # where the offset becomes an address (nvcc hoists the product out of the loop that uses it)
        where = source_of(insns[widened], files)
        if where[1] is None:
            where = source_of(i, files)
        if where in seen:
            continue
        seen.add(where)
        product = source_of(i, files)[1]
        hits.append(Hit(KIND, name, where[0], where[1], f"{i.text}\n{insns[widened].text}",
                        product_line=product if product != where[1] else None))
    return hits


def _is_program_index(i: Insn) -> bool:
    return i.op.startswith("mov.") and any("%ctaid" in op for op in i.operands[1:])


def _is_param32(i: Insn) -> bool:
    return bool(_PARAM32.match(i.op))


def _from(operand: str, defs: dict[str, Insn], test: Callable[[Insn], bool]) -> bool:
    """Whether ``operand`` is computed from an instruction that passes ``test``, walking back
    through definitions (a load or an atomic ends the walk: what it read is data)."""
    return any(test(d) for _, d in behind(_REG.findall(operand), defs, stop=("ld.", "atom.")))


def _widened(product: str, insns: list[Insn], uses: dict[str, list[int]]) -> int | None:
    """The first instruction that widens ``product``, or a 32-bit value computed from it, to 64
    bits; None when it stays 32-bit (a loop bound, a mask, a comparison)."""
    seen: set[str] = set()
    todo = [product]
    while todo:
        reg = todo.pop()
        if reg in seen:
            continue
        seen.add(reg)
        for n in uses.get(reg, []):
            i = insns[n]
            if _WIDEN.match(i.op):
                return n
            if _NARROW_ARITH.match(i.op) and i.operands:
                todo.append(i.operands[0])
    return None

