"""Size thresholds as plain data: integer expressions over a spec's dims, compared with bounds.

A wrapper that picks a code path by size (``if n_rows >= 32768 and n_cols <= 256``,
``triton.next_power_of_2(n) > 8192``, ``M * N > ...``) is read statically on the judge's side
(:mod:`gpu_gate.shapescan`); what it found crosses into the schedule as these records, which
evaluate the expressions for any dims and decide nothing. An expression is nested tuples (lists in
JSON): ``("dim", "rows")``, ``("const", 3)``, ``("+", a, b)`` (any operator of :data:`BINARY`),
``("call", "next_power_of_2", a)`` (any function of :data:`FUNCTIONS`).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

Expr = tuple[Any, ...]


def _npow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


BINARY: dict[str, Callable[[Any, Any], object]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "//": lambda a, b: a // b,
    "/": lambda a, b: a / b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b, "<<": lambda a, b: a << b,
    ">>": lambda a, b: a >> b, "&": lambda a, b: a & b, "|": lambda a, b: a | b,
}
FUNCTIONS: dict[str, Callable[..., object]] = {
    "next_power_of_2": _npow2, "cdiv": _cdiv, "max": max, "min": min, "abs": abs, "int": int,
    "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "sqrt": math.sqrt, "neg": lambda a: -a,
}
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}
NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def evaluate(e: Expr, dims: Mapping[str, int]) -> object:
    """The expression's value for ``dims``; raises ``ValueError`` where it has none (a dim not
    given, a division by zero, an unknown operator)."""
    head = e[0]
    try:
        if head == "dim":
            return dims[e[1]]
        if head == "const":
            return e[1]
        if head == "call":
            return FUNCTIONS[e[1]](*(evaluate(a, dims) for a in e[2:]))
        return BINARY[head](evaluate(e[1], dims), evaluate(e[2], dims))
    except (KeyError, ZeroDivisionError, OverflowError, TypeError, ValueError) as exc:
        raise ValueError(f"cannot evaluate {render(e)}: {exc}") from None


def dims_of(e: Expr) -> set[str]:
    if e[0] == "dim":
        return {e[1]}
    if e[0] == "const":
        return set()
    return set().union(*(dims_of(a) for a in e[2 if e[0] == "call" else 1:]))


_PRECEDENCE = {"**": 4, "*": 3, "//": 3, "/": 3, "%": 3, "+": 2, "-": 2, "<<": 1, ">>": 1, "&": 0, "|": 0}


def render(e: Expr, parent: str | None = None, right: bool = False) -> str:
    """The expression as Python-like text, for messages (parentheses only where Python needs them)."""
    if e[0] == "dim":
        return str(e[1])
    if e[0] == "const":
        return format(e[1], "g") if isinstance(e[1], float) else str(e[1])
    if e[0] == "call":
        return f"{e[1]}({', '.join(render(a) for a in e[2:])})"
    text = f"{render(e[1], e[0])} {e[0]} {render(e[2], e[0], right=True)}"
    if parent is None:
        return text
    mine, theirs = _PRECEDENCE.get(e[0], 0), _PRECEDENCE.get(parent, 0)
    bare = mine > theirs or (mine == theirs and (not right or (e[0] == parent and e[0] in ("+", "*"))))
    return text if bare else f"({text})"


@dataclasses.dataclass(frozen=True)
class Atom:
    """``expr op bound``: one comparison of a size-derived value."""

    expr: Expr
    op: str
    bound: float

    def holds(self, dims: Mapping[str, int]) -> bool | None:
        """Whether it holds for ``dims``; None where it cannot be evaluated."""
        try:
            return bool(COMPARE[self.op](evaluate(self.expr, dims), self.bound))
        except ValueError:
            return None

    def negated(self) -> Atom:
        return Atom(self.expr, NEGATED[self.op], self.bound)

    def dims(self) -> set[str]:
        return dims_of(self.expr)

    def text(self) -> str:
        bound = int(self.bound) if float(self.bound).is_integer() else self.bound
        return f"{render(self.expr)} {self.op} {bound}"

    def to_json(self) -> list[object]:
        return [self.expr, self.op, self.bound]


def as_expr(raw: object) -> Expr:
    """An expression read back from JSON (lists) as nested tuples."""
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ValueError(f"not an expression: {raw!r}")
    return tuple(as_expr(a) if isinstance(a, (list, tuple)) else a for a in raw)


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A condition found in the code: true when any of its conjunctions holds (each a list of
    atoms that must all hold). ``where``: ``file:line``; ``text``: the condition as written."""

    where: str
    text: str
    any_of: tuple[tuple[Atom, ...], ...]

    def to_json(self) -> dict[str, object]:
        return {"where": self.where, "text": self.text, "any_of": [[a.to_json() for a in c] for c in self.any_of]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Threshold:
        return cls(str(d["where"]), str(d["text"]),
                   tuple(tuple(Atom(as_expr(a[0]), str(a[1]), float(a[2])) for a in c) for c in d["any_of"]))
