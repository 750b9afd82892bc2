"""Where specs import the repository's packages from: the policy's python_path, else the
package directories pyproject.toml names, then the root."""
from __future__ import annotations

import pytest

from gpu_gate.pythonpath import python_path


@pytest.mark.parametrize("toml, expected", [
    ('[tool.setuptools.packages.find]\nwhere = ["src"]\n', ("src", "")),
    ('[tool.setuptools]\npackage-dir = {"" = "src"}\n', ("src", "")),
    ('[tool.setuptools]\npackage-dir = {"mylib" = "python/mylib"}\n', ("python", "")),
    ('[tool.hatch.build.targets.wheel]\npackages = ["src/mylib"]\n', ("src", "")),
    ('[tool.poetry]\npackages = [{include = "mylib", from = "lib"}]\n', ("lib", "")),
    ('[tool.pdm.build]\npackage-dir = "src"\n', ("src", "")),
    ('[tool.maturin]\npython-source = "python"\n', ("python", "")),
    ('[project]\nname = "flat"\n', ("",)),
    ('[tool.setuptools.packages.find]\nwhere = ["../outside"]\n', ("",)),  # never outside the repository
    ("this is = not [toml", ("",)),
])
def test_default_from_pyproject(toml: str, expected: tuple[str, ...]) -> None:
    assert python_path(toml.encode(), None) == expected


def test_no_pyproject_is_the_root() -> None:
    assert python_path(None, None) == ("",)


def test_the_policy_wins_and_is_normalised() -> None:
    assert python_path(b'[tool.setuptools.packages.find]\nwhere = ["src"]\n', ["./lib/", ".", "a/../b", "../../etc", "/abs"]) == (
        "lib", "", "b", "abs")
