"""The repository's own distribution, as ``importlib.metadata`` answers for it, where it is not installed.

Libraries read their own metadata at import (``importlib.metadata.version("mylib")``, an entry point
table). In the project's own tests the package is installed (``pip install -e .``); the gate imports it
from the work tree under review, where, at the base's commit or on a runner that never installed it,
there is no metadata and the import fails with ``PackageNotFoundError``, which is no fault of the code.
So a worker that imports a tree answers for the distribution its ``pyproject.toml`` names: name and
version as declared (``0`` where the version is dynamic). An installed copy of the same name is found
first, as Python finds it: the finder goes last on ``sys.meta_path``.
"""
from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import os


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class _TreeDistribution(importlib.metadata.Distribution):
    def __init__(self, root: Path, name: str, version: str) -> None:
        self._root, self._text = root, f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"

    def read_text(self, filename: str) -> str | None:
        return self._text if filename in ("METADATA", "PKG-INFO") else None

    def locate_file(self, path: str | os.PathLike[str]) -> Path:
        return self._root / str(path)


class _TreeFinder(importlib.metadata.DistributionFinder):
    def __init__(self, root: Path, name: str, version: str) -> None:
        self.root, self.name, self.dist = root, _normal(name), _TreeDistribution(root, name, version)

    # a metadata finder only: modules are not its business
    def find_spec(self, *args: object, **kwargs: object) -> None:
        return None

    def find_distributions(self, context: importlib.metadata.DistributionFinder.Context =
                           importlib.metadata.DistributionFinder.Context()
                           ) -> Iterable[importlib.metadata.Distribution]:
        wanted = getattr(context, "name", None)
        if wanted is None or _normal(str(wanted)) == self.name:
            yield self.dist


def declared(pyproject: Path) -> tuple[str, str] | None:
    """The ``[project]`` name and version a ``pyproject.toml`` declares (version ``0`` where dynamic);
    None where it declares no name or cannot be read."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    project = data.get("project")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str) or not project["name"].strip():
        return None
    version = project.get("version")
    return project["name"].strip(), version.strip() if isinstance(version, str) and version.strip() else "0"


def answer_for(repo_root: Path) -> None:
    """Have ``importlib.metadata`` answer for the distribution ``repo_root``'s pyproject.toml declares,
    behind any installed copy; once per root (a later call for another root replaces the answer)."""
    for finder in [f for f in sys.meta_path if isinstance(f, _TreeFinder)]:
        if finder.root == repo_root:
            return
        sys.meta_path.remove(finder)
    found = declared(repo_root / "pyproject.toml")
    if found is not None:
        sys.meta_path.append(_TreeFinder(repo_root, *found))
