"""`extends:`: a policy builds on a preset or on another YAML file of its own tree (repository or revision).
Mappings merge deeply; lists replace."""
from __future__ import annotations

import difflib
import posixpath
from pathlib import Path
from typing import Any

from ..judge.checks import CHECKS
from ..errors import PolicyError
from .source import Document, KeyPath, Spot, parse_document
from .tree import PolicyTree, PresetTree, inside, outside_error

PRESETS_DIR = Path(__file__).parent / "presets"
PRESETS = ("default", "strict")


def preset_path(name: str) -> Path:
    return PRESETS_DIR / f"{name}.yml"


def preset_display(path: Path) -> str | None:
    """Presets are named like the `policies/` folder that ships them, wherever gpu-gate is installed."""
    if path.parent.resolve() == PRESETS_DIR.resolve() and path.stem in PRESETS:
        return f"policies/{path.name}"
    return None


_PRESET_TREE = PresetTree(PRESETS_DIR)
Located = tuple[PolicyTree, str]


def load_merged(tree: PolicyTree, rel: str) -> Document:
    """Read ``rel`` in ``tree`` and everything it extends, and merge them, the extending file winning."""
    layers = _chain(tree, rel)
    top_extends = layers[-1].data.get("extends")
    merged = Document({}, {(): layers[-1].spots[()]})
    for layer in layers:
        layer.data.pop("extends", None)
        merged = _merge_documents(merged, layer)
    if top_extends is not None:
        merged.data["extends"] = top_extends
    return merged


def _chain(tree: PolicyTree, rel: str) -> list[Document]:
    """The files from the base preset up to ``rel``; each is normalised before merging."""
    seen: list[Located] = []
    docs: list[Document] = []
    current: Located | None = (tree, rel)
    while current is not None:
        seen.append(current)
        here_tree, here = current
        doc = parse_document(here_tree.read(here), here_tree.display(here))
        _expand_check_shorthands(doc)
        docs.append(doc)
        current = _target(doc, current, seen)
    return docs[::-1]


def _target(doc: Document, current: Located, seen: list[Located]) -> Located | None:
    value = doc.data.get("extends")
    if value is None:
        return None
    at = str(doc.where(("extends",)))
    if not isinstance(value, str) or not value:
        raise PolicyError(f"{at}: extends: expected a preset name or a relative path, got {_short(value)}",
                          f"write e.g. extends: default; presets: {', '.join(PRESETS)}")
    target = _resolve(value, current, at)
    tree, rel = target
    if tree.key(rel) in {t.key(r) for t, r in seen}:
        names = [t.display(r) for t, r in seen + [target]]
        raise PolicyError(f"{at}: extends cycle: {' -> '.join(names)}", "remove one of these extends")
    if not tree.exists(rel):
        raise PolicyError(f"{at}: extends: file {value!r} not found",
                          f"looked for {_printable(tree.display(rel))}; paths are relative to the file that "
                          f"extends them")
    return target


def _resolve(value: str, current: Located, at: str) -> Located:
    if value in PRESETS:
        return _PRESET_TREE, f"{value}.yml"
    tree, rel = current
    if "/" in value or "\\" in value or value.endswith((".yml", ".yaml")):
        if tree is _PRESET_TREE:
            raise PolicyError(f"{at}: extends: a preset extends presets only, got {value!r}",
                              f"presets: {', '.join(PRESETS)}")
        target = inside(posixpath.dirname(rel), value)
        if target is None:
            raise outside_error(at, f"extends: {value!r}")
        return tree, target
    close = difflib.get_close_matches(value, PRESETS, n=1)
    guess = f"did you mean '{close[0]}'? " if close else ""
    raise PolicyError(f"{at}: extends: unknown preset {value!r}",
                      f"{guess}presets: {', '.join(PRESETS)}; or give a relative path such as base.yml")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _printable(text: str) -> str:
    """A path as it is, or escaped where it holds control characters (a line break in a name must
    not break the one-line error)."""
    return text if text.isprintable() else _short(text)


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
