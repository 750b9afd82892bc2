"""Reading one policy YAML file into plain data, remembering where every key and value sits."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from ..errors import PolicyError

KeyPath = tuple[str | int, ...]
_STR_TAG = "tag:yaml.org,2002:str"
MAX_VALUES = 100_000
# Characters str.splitlines() breaks on: a key that holds one must not split an error into two lines.
_BREAKS = {ord(c): ascii(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    """``text`` with its line breaks written as escapes: every error is exactly one line."""
    return text.translate(_BREAKS)
_KEY_KINDS = {"bool": "boolean", "int": "number", "float": "number", "null": "null value", "timestamp": "date"}


@dataclasses.dataclass(frozen=True)
class Where:
    """A 1-based position in a policy file."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    @classmethod
    def of(cls, file: str, mark: yaml.Mark) -> Where:
        return cls(file, mark.line + 1, mark.column + 1)


@dataclasses.dataclass(frozen=True)
class Spot:
    key: Where  # where the key is written (the value's position for list items and the root)
    value: Where


@dataclasses.dataclass
class Document:
    """Data from one or more policy files, with the spot of every path in it."""

    data: dict[str, Any]
    spots: dict[KeyPath, Spot]

    def where(self, path: KeyPath, *, key: bool = False) -> Where:
        """The spot of ``path``, or of its closest written ancestor (values pydantic fills in have none)."""
        for end in range(len(path), -1, -1):
            spot = self.spots.get(path[:end])
            if spot is not None:
                return spot.key if key and end == len(path) else spot.value
        raise KeyError(path)  # the root always has a spot


def read_document(path: Path, display: str) -> Document:
    """Parse ``path``; YAML errors become a PolicyError at the offending line and column."""
    return parse_document(_read_bytes(path, display), display)


def parse_document(raw: bytes, display: str) -> Document:
    """Parse policy text; every YAML error becomes a PolicyError at its line and column, never a traceback."""
    text = _decode_text(raw, display)
    try:
        return _parse(text, display)
    except RecursionError:
        raise PolicyError(f"{display}:1:1: invalid YAML: nested too deeply",
                          "a policy is a few levels of mappings; remove the extra nesting") from None


def _parse(text: str, display: str) -> Document:
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as err:  # the reader checks the characters before anything is parsed
        raise PolicyError(_yaml_message(err, display, text)) from None
    try:
        node = loader.get_single_node()
        root = Where.of(display, node.start_mark) if node is not None else Where(display, 1, 1)
        spots: dict[KeyPath, Spot] = {(): Spot(root, root)}
        errors: list[str] = []
        if node is not None and _expanded_size(node, {}, set()) > MAX_VALUES:
            # Aliases of aliases (a "billion laughs") would make every later step walk millions of values.
            raise PolicyError(f"{root}: the policy expands to more than {MAX_VALUES} values through its aliases",
                              "write the settings out; a policy needs no more than a few aliases")
        if node is not None:
            _record(node, (), display, spots, errors, set())
        if errors:
            raise PolicyError("\n".join(errors))
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as err:
        raise PolicyError(_yaml_message(err, display, text)) from None
    finally:
        loader.dispose()
    return Document(_as_mapping(data, root), spots)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], stack: set[int]) -> int:
    """How many values the document holds once its aliases are expanded (computed once per node)."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in stack:  # a recursive alias
        return 1
    stack.add(id(node))
    total = 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            total += _expanded_size(key, sizes, stack) + _expanded_size(value, sizes, stack)
            if total > MAX_VALUES:
                break
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            total += _expanded_size(item, sizes, stack)
            if total > MAX_VALUES:
                break
    stack.discard(id(node))
    sizes[id(node)] = total
    return total


def _read_bytes(path: Path, display: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise PolicyError(f"{display}: file not found", "check the path; with no policy file the default preset applies") from None
    except IsADirectoryError:
        raise PolicyError(f"{display}: is a directory, not a policy file", "give the path of a YAML file") from None
    except OSError as err:
        raise PolicyError(f"{display}: cannot be read ({err.strerror or type(err).__name__})",
                          "check the path and its permissions") from None


def _decode_text(raw: bytes, display: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        col = len(raw[raw.rfind(b"\n", 0, err.start) + 1: err.start].decode("utf-8", "replace")) + 1
        raise PolicyError(f"{display}:{line}:{col}: not UTF-8 text ({err.reason})", "save the file as UTF-8") from None


def _as_mapping(data: Any, root: Where) -> dict[str, Any]:
    if data is None:  # an empty file (or only comments) means every default
        return {}
    if not isinstance(data, dict):
        got = "a list" if isinstance(data, list) else f"{type(data).__name__} {data!r}"
        raise PolicyError(f"{root}: the policy must be a mapping, got {got}",
                          "start the file with `version: 1` and put each setting on its own `key: value` line")
    return data


def _record(node: yaml.Node, path: KeyPath, file: str, spots: dict[KeyPath, Spot],
            errors: list[str], stack: set[int]) -> None:
    """Walk the node tree before construction: marks are on nodes, not on the constructed data."""
    if id(node) in stack:  # a recursive alias; the constructor reports nothing useful for it
        return
    stack = stack | {id(node)}
    if isinstance(node, yaml.MappingNode):
        _record_mapping(node, path, file, spots, errors, stack)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            here = Where.of(file, item.start_mark)
            spots[path + (index,)] = Spot(here, here)
            _record(item, path + (index,), file, spots, errors, stack)


def _record_mapping(node: yaml.MappingNode, path: KeyPath, file: str, spots: dict[KeyPath, Spot],
                    errors: list[str], stack: set[int]) -> None:
    first_line: dict[str, int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
            continue
        name = key_node.value
        key_at = Where.of(file, key_node.start_mark)
        if key_node.tag != _STR_TAG:
            # YAML 1.1 reads `on:`, `no:` or `1:` as a boolean or number, which no setting is named.
            kind = key_node.tag.rsplit(":", 1)[-1]
            kind = _KEY_KINDS.get(kind, kind)
            errors.append(f"{key_at}: key '{one_line(name)}' is read by YAML as a {kind}, not a name (quote it, or fix the key)")
            continue
        if name in first_line:
            # PyYAML silently keeps the last one; a duplicated setting is almost always a mistake.
            errors.append(f"{key_at}: duplicate key '{one_line(name)}' (it is already set on line {first_line[name]}; keep one)")
            continue
        first_line[name] = key_at.line
        spots[path + (name,)] = Spot(key_at, Where.of(file, value_node.start_mark))
        _record(value_node, path + (name,), file, spots, errors, stack)


def _yaml_message(err: yaml.YAMLError, display: str, text: str) -> str:
    if isinstance(err, yaml.reader.ReaderError):
        return _reader_message(err, display, text)
    if not isinstance(err, yaml.MarkedYAMLError):
        return f"{display}:1:1: invalid YAML: {type(err).__name__} (check the file's syntax)"
    mark = err.problem_mark or err.context_mark
    at = Where.of(display, mark) if mark is not None else Where(display, 1, 1)
    what = err.problem or err.context or "cannot be parsed"
    if "another document" in what:
        what = "a second document starts here"
    elif err.problem and err.context and err.context_mark is not None:
        what += f", {err.context} started at line {err.context_mark.line + 1}"
    return one_line(f"{at}: invalid YAML: {what} ({_yaml_hint(err)})")


def _reader_message(err: yaml.reader.ReaderError, display: str, text: str) -> str:
    """A character YAML does not allow (a control character, say): named by its code, never echoed."""
    before = text[: max(0, int(err.position))]
    line = before.count("\n") + 1
    col = len(before) - (before.rfind("\n") + 1) + 1
    code = err.character if isinstance(err.character, int) else ord(str(err.character)[:1] or "\0")
    return (f"{display}:{line}:{col}: invalid YAML: character U+{code:04X} is not allowed in a YAML file "
            f"(remove it, or write it as an escape such as \\x{code & 0xFF:02x} inside double quotes)")


def _yaml_hint(err: yaml.MarkedYAMLError) -> str:
    problem, context = err.problem or "", err.context or ""
    if "'\\t'" in problem:
        return "indent with spaces; YAML does not allow tabs"
    if "another document" in problem:
        return "a policy file holds one document; remove the '---' line"
    if "mapping values are not allowed" in problem:
        return "indent this line like the keys above it, or quote a value that contains ': '"
    if "flow" in context:
        return "close the brackets, and separate the items with commas"
    if "quoted scalar" in context:
        return "close the quote"
    if "block" in context:
        return "indent this line like the keys above it"
    return "check the indentation and quoting here and on the line above"
