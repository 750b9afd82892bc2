"""Reading a message's fields: each one of the type, size and shape it must have, or a
:class:`~gpu_gate.protocol.wire.BadMessage` that names the message and the field."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from ..wire import BadMessage, Json

MAX_TEXT = 64 << 10  # characters of any one text a worker sends (a message, a traceback)
MAX_NAME = 1 << 10  # characters of a name (an output, an input, a dim, a setting)
MAX_ITEMS = 1 << 12  # entries of a mapping or list of names or figures
MAX_RANK = 16  # dims of a tensor
MAX_DIM = 1 << 48  # elements along one dim: more than any memory holds
MAX_INT = 1 << 63

T = TypeVar("T")


def text(value: object, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise BadMessage(f"{what}: expected text, got {type(value).__name__}")
    return value[:limit]


def mapping(value: object, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise BadMessage(f"{what}: expected a mapping, got {type(value).__name__}")
    if len(value) > MAX_ITEMS:
        raise BadMessage(f"{what}: {len(value)} entries (at most {MAX_ITEMS})")
    return value


def items(value: object, what: str, most: int = MAX_ITEMS) -> list[object]:
    if not isinstance(value, list):
        raise BadMessage(f"{what}: expected a list, got {type(value).__name__}")
    if len(value) > most:
        raise BadMessage(f"{what}: {len(value)} entries (at most {most})")
    return value


def integer(value: object, what: str, lo: int = -MAX_INT, hi: int = MAX_INT) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadMessage(f"{what}: expected an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise BadMessage(f"{what}: {value} is out of range [{lo}, {hi}]")
    return value


def number(value: object, what: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise BadMessage(f"{what}: expected a number, got {type(value).__name__}")
    return float(value)


def flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise BadMessage(f"{what}: expected true or false, got {type(value).__name__}")
    return value


def names(value: object, what: str, limit: int = MAX_NAME, most: int = MAX_ITEMS) -> tuple[str, ...]:
    return tuple(text(v, f"{what}[{i}]", limit) for i, v in enumerate(items(value, what, most)))


def name_map(value: object, what: str) -> dict[str, str]:
    return {text(k, what, MAX_NAME): text(v, f"{what}[{k!r}]", MAX_NAME) for k, v in mapping(value, what).items()}


def figures(value: object, what: str) -> dict[str, float | int | bool]:
    """Figures a worker reports for the timing report only (never a verdict): numbers and flags by
    name; anything else in the mapping is dropped, as it always was."""
    return {text(k, what, MAX_NAME): v for k, v in mapping(value, what).items()
            if isinstance(v, (int, float, bool))}


def shape(value: object, what: str) -> tuple[int, ...]:
    dims = items(value, what)
    if len(dims) > MAX_RANK:
        raise BadMessage(f"{what}: {len(dims)} dims (at most {MAX_RANK})")
    return tuple(integer(n, f"{what}[{i}]", 0, MAX_DIM) for i, n in enumerate(dims))


def strides(value: object, what: str) -> tuple[int, ...]:
    dims = items(value, what)
    if len(dims) > MAX_RANK:
        raise BadMessage(f"{what}: {len(dims)} dims (at most {MAX_RANK})")
    return tuple(integer(n, f"{what}[{i}]", -MAX_DIM, MAX_DIM) for i, n in enumerate(dims))


def span(value: object, what: str) -> tuple[int, int]:
    """Two addresses (a tensor's data and its storage, or a storage's start and end)."""
    pair = items(value, what)
    if len(pair) != 2:
        raise BadMessage(f"{what}: expected two addresses, got {len(pair)}")
    return integer(pair[0], f"{what}[0]", 0, 1 << 64), integer(pair[1], f"{what}[1]", 0, 1 << 64)


def optional(value: object, read: Callable[[object, str], T], what: str) -> T | None:
    return None if value is None else read(value, what)


def json_value(value: object, what: str, depth: int = 8) -> Json:
    """Plain JSON data (a value a worker reports and a reader further on examines field by field),
    bounded in depth and breadth; its texts whole (a compiler's output, PTX: the header's own size
    bounds them)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth <= 0:
        raise BadMessage(f"{what}: nested too deep")
    if isinstance(value, list):
        return [json_value(v, what, depth - 1) for v in items(value, what)]
    if isinstance(value, dict):
        return {text(k, what, MAX_NAME): json_value(v, what, depth - 1) for k, v in mapping(value, what).items()}
    raise BadMessage(f"{what}: not JSON data ({type(value).__name__})")


def json_mapping(value: object, what: str) -> dict[str, Json]:
    """Plain JSON data (see :func:`json_value`) that is a mapping."""
    return cast("dict[str, Json]", mapping(json_value(value, what), what))


class Fields:
    """A message's fields, read one by one: ``what`` names the message in every complaint."""

    def __init__(self, d: object, what: str) -> None:
        self.d: Mapping[str, object] = mapping(d, what)
        self.what = what

    def name(self, key: str) -> str:
        return f"{self.what} {key}"

    def get(self, key: str, default: object = None) -> object:
        return self.d.get(key, default)

    def text(self, key: str, limit: int = MAX_TEXT) -> str:
        return text(self.d.get(key), self.name(key), limit)

    def opt_text(self, key: str, limit: int = MAX_TEXT) -> str | None:
        return optional(self.d.get(key), lambda v, w: text(v, w, limit), self.name(key))

    def integer(self, key: str, lo: int = -MAX_INT, hi: int = MAX_INT) -> int:
        return integer(self.d.get(key), self.name(key), lo, hi)

    def number(self, key: str, default: float | None = None) -> float:
        if default is not None and self.d.get(key) is None:
            return default
        return number(self.d.get(key), self.name(key))

    def flag(self, key: str, default: bool | None = None) -> bool:
        if default is not None and key not in self.d:
            return default
        return flag(self.d.get(key), self.name(key))

    def names(self, key: str, limit: int = MAX_NAME, most: int = MAX_ITEMS) -> tuple[str, ...]:
        return names(self.d.get(key, []), self.name(key), limit, most)

    def figures(self, key: str) -> dict[str, float | int | bool]:
        return figures(self.d.get(key, {}), self.name(key))

    def mapping(self, key: str) -> dict[str, object]:
        return mapping(self.d.get(key, {}), self.name(key))

    def json(self, key: str) -> Json:
        return json_value(self.d.get(key), self.name(key))

    def either(self, key: str) -> bool | str | None:
        """A fact that is true, or says why not (text), or was not asked for (None)."""
        value = self.d.get(key)
        if value is None or isinstance(value, bool):
            return value
        return text(value, self.name(key))
