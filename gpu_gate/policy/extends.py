"""`extends:`: a policy builds on a preset or on another YAML file. Mappings merge deeply; lists replace."""
from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..checks import CHECKS
from ..errors import PolicyError
from .source import Document, KeyPath, Spot, read_document

PRESETS_DIR = Path(__file__).parent / "presets"
PRESETS = ("default", "strict")

Display = Callable[[Path], str]


def preset_path(name: str) -> Path:
    return PRESETS_DIR / f"{name}.yml"


def preset_display(path: Path) -> str | None:
    """Presets are named like the `policies/` folder that ships them, wherever gpu-gate is installed."""
    if path.parent.resolve() == PRESETS_DIR.resolve() and path.stem in PRESETS:
        return f"policies/{path.name}"
    return None


def load_merged(path: Path, display: Display) -> Document:
    """Read ``path`` and everything it extends, and merge them, the extending file winning."""
    layers = _chain(path, display)
    top_extends = layers[-1].data.get("extends")
    merged = Document({}, {(): layers[-1].spots[()]})
    for layer in layers:
        layer.data.pop("extends", None)
        merged = _merge_documents(merged, layer)
    if top_extends is not None:
        merged.data["extends"] = top_extends
    return merged


def _chain(path: Path, display: Display) -> list[Document]:
    """The files from the base preset up to ``path``; each is normalised before merging."""
    seen: list[Path] = []
    docs: list[Document] = []
    current: Path | None = path
    while current is not None:
        seen.append(current.resolve())
        doc = read_document(current, preset_display(current) or display(current))
        _expand_check_shorthands(doc)
        docs.append(doc)
        current = _target(doc, current, seen, display)
    return docs[::-1]


def _target(doc: Document, current: Path, seen: list[Path], display: Display) -> Path | None:
    value = doc.data.get("extends")
    if value is None:
        return None
    at = doc.where(("extends",))
    if not isinstance(value, str) or not value:
        raise PolicyError(f"{at}: extends: expected a preset name or a relative path, got {value!r}",
                          f"write e.g. extends: default; presets: {', '.join(PRESETS)}")
    target = _resolve(value, current, str(at))
    if target.resolve() in seen:
        names = [preset_display(p) or display(p) for p in seen + [target.resolve()]]
        raise PolicyError(f"{at}: extends cycle: {' -> '.join(names)}", "remove one of these extends")
    if not target.is_file():
        raise PolicyError(f"{at}: extends: file '{value}' not found",
                          f"looked for {display(target)}; paths are relative to the file that extends them")
    return target


def _resolve(value: str, current: Path, at: str) -> Path:
    if value in PRESETS:
        return preset_path(value)
    if "/" in value or "\\" in value or value.endswith((".yml", ".yaml")):
        return current.parent / value
    close = difflib.get_close_matches(value, PRESETS, n=1)
    guess = f"did you mean '{close[0]}'? " if close else ""
    raise PolicyError(f"{at}: extends: unknown preset '{value}'",
                      f"{guess}presets: {', '.join(PRESETS)}; or give a relative path such as base.yml")


def _expand_check_shorthands(doc: Document) -> None:
    """`memcheck: advisory` merges like `memcheck: {level: advisory}`, keeping the base's other settings."""
    checks = doc.data.get("checks")
    if not isinstance(checks, dict):
        return
    for name, value in checks.items():
        if name in CHECKS and isinstance(value, (str, bool)):
            checks[name] = {"level": value}
            doc.spots[("checks", name, "level")] = doc.spots[("checks", name)]


def _merge_documents(base: Document, over: Document) -> Document:
    spots = dict(base.spots)
    data = _merge(base.data, over.data, (), spots)
    spots.update(over.spots)
    return Document(data, spots)


def _merge(base: dict[str, Any], over: dict[str, Any], path: KeyPath, spots: dict[KeyPath, Spot]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        here = path + (key,)
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = _merge(base[key], value, here, spots)
        else:
            _forget(spots, here)
            out[key] = value
    return out


def _forget(spots: dict[KeyPath, Spot], prefix: KeyPath) -> None:
    """A replaced value takes its spots with it (a list item of the base no longer exists)."""
    for key in [k for k in spots if k[: len(prefix)] == prefix]:
        del spots[key]
