"""From merged policy data to a Policy, or to `path:line:col: what is wrong (hint)` lines."""
from __future__ import annotations

import dataclasses
import difflib
import json
import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from ..judge.checks import CHECKS
from .models import Policy
from .source import Document, KeyPath, Where, one_line


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    policy: Policy | None  # None when there are errors
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class _Line:
    at: Where
    text: str

    def sort_key(self) -> tuple[str, int, int]:
        return (self.at.file, self.at.line, self.at.col)


def diagnose(doc: Document, *, strict: bool) -> Diagnosis:
    """Validate; unknown keys warn (errors when ``strict``), unknown check names are always errors."""
    try:
        return Diagnosis(Policy.model_validate(doc.data), (), ())
    except ValidationError as err:
        details = err.errors()
    errors: list[_Line] = []
    warnings: list[_Line] = []
    for detail in details:
        if detail["type"] != "extra_forbidden":
            errors.append(_explain(detail, doc))
            continue
        line, is_error = _unknown_key(tuple(detail["loc"]), doc, strict)
        (errors if is_error else warnings).append(line)
        _delete(doc.data, tuple(detail["loc"]))
    policy = None
    if not errors:
        try:
            policy = Policy.model_validate(doc.data)
        except ValidationError as err:  # defensive: stripping unknown keys cannot add errors
            errors = [_explain(d, doc) for d in err.errors()]
    return Diagnosis(policy, _sorted(errors), _sorted(warnings))


def _sorted(lines: list[_Line]) -> tuple[str, ...]:
    return tuple(one_line(line.text) for line in sorted(lines, key=_Line.sort_key))


def _delete(data: Any, loc: KeyPath) -> None:
    for part in loc[:-1]:
        data = data[part]
    data.pop(loc[-1], None)  # a YAML alias can share one mapping between two places


def _unknown_key(loc: KeyPath, doc: Document, strict: bool) -> tuple[_Line, bool]:
    at = doc.where(loc, key=True)
    name = str(loc[-1])
    if loc[:1] == ("checks",) and len(loc) == 2:
        valid = ", ".join(CHECKS)
        hint = " ".join(p for p in (_did_you_mean(name, list(CHECKS)), f"valid checks: {valid}") if p)
        return _Line(at, f"{at}: unknown check '{name}' ({hint})"), True
    valid_keys = _fields(_model_at(loc[:-1]))
    hint = _did_you_mean(name, list(valid_keys)) or f"valid keys here: {', '.join(valid_keys)}"
    where = f" in {_dotted(loc[:-1])}" if len(loc) > 1 else ""
    if strict:
        return _Line(at, f"{at}: unknown key '{name}'{where} (strict mode; {hint})"), True
    return _Line(at, f"{at}: warning: unknown key '{name}'{where} is ignored ({hint})"), False


def _did_you_mean(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1)
    return f"did you mean '{close[0]}'?" if close else ""


def _explain(detail: ErrorDetails, doc: Document) -> _Line:
    loc = tuple(detail["loc"])
    at = doc.where(loc)
    what, hint = _what_and_hint(detail, loc)
    prefix = f"{_dotted(loc)}: " if loc else ""
    return _Line(at, f"{at}: {prefix}{what} ({hint})")


def _what_and_hint(detail: ErrorDetails, loc: KeyPath) -> tuple[str, str]:
    kind, ctx, got = detail["type"], detail.get("ctx") or {}, _show(detail["input"])
    default = _default_at(loc)
    example = f"e.g. {loc[-1]}: {_yaml_value(default)}" if loc and isinstance(loc[-1], str) and default is not None else ""
    if len(loc) == 2 and loc[0] == "checks" and kind in ("model_type", "model_attributes_type"):
        return f"expected 'required', 'advisory', 'off' or a mapping of settings, got {got}", f"e.g. {loc[1]}: required"
    if "hint" in ctx:
        return detail["msg"], str(ctx["hint"])
    if kind == "literal_error":
        options = [o.strip().strip("'") for o in str(ctx["expected"]).replace(" or ", ", ").split(",")]
        if len(options) == 1:
            return f"expected {ctx['expected']}, got {got}", f"write {loc[-1]}: {options[0]}"
        guess = _did_you_mean(str(detail["input"]), options)
        return f"expected one of {ctx['expected']}, got {got}", guess or "choose one of these"
    simple = _SIMPLE.get(kind)
    if simple is not None:
        return f"expected {simple}, got {got}", example or f"write {simple}"
    if kind in _BOUNDS:
        return f"must be {_BOUNDS[kind]} {ctx[_BOUND_CTX[kind]]}, got {got}", example or "use a value in range"
    if kind == "too_short":
        return "must not be empty", example or "give at least one item, or remove the key"
    return detail["msg"], "see policies/default.yml for every setting and its form"


_SIMPLE = {
    "int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
    "float_parsing": "a number", "float_type": "a number",
    "bool_parsing": "true or false", "bool_type": "true or false",
    "string_type": "a string",
    "tuple_type": "a list", "list_type": "a list",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "dict_type": "a mapping",
}
_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")
_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
_BOUND_CTX = {"greater_than_equal": "ge", "greater_than": "gt", "less_than_equal": "le", "less_than": "lt"}


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "an empty value"
    return _yaml_value(value) if isinstance(value, bool) else repr(value)


def _yaml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        return "{...}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, str) and not _PLAIN.match(value):
        return json.dumps(value)  # e.g. `**/*.cu` unquoted would read as a YAML alias
    return str(value)


def _dotted(loc: KeyPath) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _model_at(loc: KeyPath) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Policy
    for part in loc:
        field = model.model_fields.get(part) if model is not None and isinstance(part, str) else None
        if field is None:
            return None
        model = _as_model(field.annotation)
    return model


def _as_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _as_model(arg)
        if found is not None:
            return found
    return None


def _fields(model: type[BaseModel] | None) -> tuple[str, ...]:
    return tuple(model.model_fields) if model is not None else ()


def _default_at(loc: KeyPath) -> Any:
    model = _model_at(loc[:-1]) if loc else None
    field = model.model_fields.get(loc[-1]) if model is not None and isinstance(loc[-1], str) else None
    return None if field is None else field.default
