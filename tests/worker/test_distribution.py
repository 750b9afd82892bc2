"""A library that reads its own metadata at import imports from the work tree, at the base as at the head.

Seen on a src/ layout shaped as Liger-Kernel is: the base's worker, which imports the base's tree with no
install of it, failed with PackageNotFoundError, and the change was never compared with the base's code."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpu_gate.worker.distribution import declared

PROBE = """
import importlib.metadata as md, sys
from pathlib import Path
from gpu_gate.worker.loader import user_path
user_path(Path(sys.argv[1]), ("src", ""))
import fusekit
print(fusekit.__version__, md.version("pip") != "", sep="|")
try:
    md.version("not-a-distribution-anywhere")
except md.PackageNotFoundError:
    print("unknown names stay unknown")
"""


def _tree(root: Path, pyproject: str) -> Path:
    (root / "src" / "fusekit").mkdir(parents=True)
    (root / "pyproject.toml").write_text(pyproject)
    (root / "src" / "fusekit" / "__init__.py").write_text(
        'import importlib.metadata\n__version__ = importlib.metadata.version("fusekit")\n')
    return root


def _probe(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-c", PROBE, str(root)], capture_output=True, text=True, timeout=120)


def test_a_package_that_reads_its_version_imports_from_an_uninstalled_tree(tmp_path: Path) -> None:
    root = _tree(tmp_path, '[project]\nname = "FuseKit"\nversion = "0.3.1"\n')
    p = _probe(root)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["0.3.1|True", "unknown names stay unknown"]


def test_without_the_answer_the_same_import_fails(tmp_path: Path) -> None:
    """The failure the answer removes is real: the tree alone has no metadata."""
    root = _tree(tmp_path, '[project]\nname = "fusekit"\nversion = "0.3.1"\n')
    p = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(root / 'src')!r}); "
                        "import fusekit"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "PackageNotFoundError" in p.stderr


def test_what_a_pyproject_declares(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('[project]\nname = "x-y"\ndynamic = ["version"]\n')
    (tmp_path / "b.toml").write_text('[tool.poetry]\nname = "x"\n')
    (tmp_path / "c.toml").write_text("not [toml")
    assert declared(tmp_path / "a.toml") == ("x-y", "0")
    assert declared(tmp_path / "b.toml") is None
    assert declared(tmp_path / "c.toml") is None
    assert declared(tmp_path / "missing.toml") is None
