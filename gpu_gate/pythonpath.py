"""Where a spec imports the repository's own packages from, without PYTHONPATH.

A ``src/`` layout keeps ``mylib`` in ``src/mylib``: ``import mylib`` works in the project's
own tests because the package is installed (``pip install -e .``), not because of the work
tree. The gate runs specs against the work tree under review, so it puts the package
directories first on ``sys.path``: the policy's ``python_path``, else those that
``pyproject.toml`` names, then the repository root (spec modules import their neighbours
from there).
"""
from __future__ import annotations

import posixpath
import tomllib
from collections.abc import Iterable, Sequence


def python_path(pyproject: bytes | None, configured: Sequence[str] | None) -> tuple[str, ...]:
    """Repository-relative directories for ``sys.path``, first to last ("" is the root), from
    the policy's list, else from the revision's ``pyproject.toml`` (its bytes, or None)."""
    if configured is not None:
        # Inside the repository only: a policy cannot put the runner's other directories first.
        return tuple(c for c in (_clean(d) for d in configured) if not c.startswith(".."))
    return (*from_pyproject(pyproject), "")


def _clean(d: str) -> str:
    norm = posixpath.normpath(d.strip().strip("/")) if d.strip() not in ("", ".", "./") else ""
    return "" if norm == "." else norm


def from_pyproject(pyproject: bytes | None) -> tuple[str, ...]:
    """Package directories other than the root that a pyproject.toml names (setuptools, hatch,
    poetry, pdm, maturin); () when it names none or cannot be read."""
    try:
        data = tomllib.loads((pyproject or b"").decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return ()
    tool = data.get("tool") if isinstance(data.get("tool"), dict) else {}
    dirs = [*_setuptools(_get(tool, "setuptools")), *_hatch(_get(tool, "hatch")), *_poetry(_get(tool, "poetry")),
            *_strings([_get(_get(tool, "pdm"), "build").get("package-dir")]),
            *_strings([_get(tool, "maturin").get("python-source")])]
    out = [c for c in (_clean(d) for d in dirs) if c and not c.startswith("..")]
    return tuple(dict.fromkeys(out))


def _get(d: object, key: str) -> dict[str, object]:
    value = d.get(key) if isinstance(d, dict) else None
    return value if isinstance(value, dict) else {}


def _strings(values: Iterable[object]) -> list[str]:
    return [v for v in values if isinstance(v, str)]


def _setuptools(st: dict[str, object]) -> list[str]:
    packages = st.get("packages")
    find = _get(packages if isinstance(packages, dict) else {}, "find")
    found_where = find.get("where")
    where: list[object] = found_where if isinstance(found_where, list) else []
    package_dir = _get(st, "package-dir")
    out = _strings(where) + _strings([package_dir.get("")])
    # {"mylib": "src/mylib"}: importable from src when the directory bears the package's name.
    for name, target in package_dir.items():
        if name and isinstance(target, str) and posixpath.basename(target.rstrip("/")) == name.split(".")[-1]:
            out.append(posixpath.dirname(target.rstrip("/")))
    return out


def _hatch(hatch: dict[str, object]) -> list[str]:
    wheel = _get(_get(_get(hatch, "build"), "targets"), "wheel")
    packages = wheel.get("packages")
    return [posixpath.dirname(p.rstrip("/")) for p in _strings(packages if isinstance(packages, list) else [])]


def _poetry(poetry: dict[str, object]) -> list[str]:
    packages = poetry.get("packages")
    return _strings(p.get("from") for p in (packages if isinstance(packages, list) else []) if isinstance(p, dict))
