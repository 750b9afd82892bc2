"""Build gpu-gate's wheel and sdist from this checkout, as the release workflow does, without a network.

The sources are copied into a fresh directory first, so that a build never writes ``build/`` or
``*.egg-info`` into the checkout the other tests run from. setuptools' PEP 517 backend runs in
this interpreter (it has setuptools), as ``pip wheel --no-build-isolation`` would.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "NOTICE", "action.yml")


def source_tree(dest: Path, version: str | None = None) -> Path:
    """A copy of what a build reads; ``version`` rewrites gpu-gate's version in both places it is kept."""
    dest.mkdir(parents=True)
    for name in SOURCES:
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "gpu_gate", dest / "gpu_gate", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if version is not None:
        for rel, pattern in (("pyproject.toml", 'version = "{}"'), ("gpu_gate/__init__.py", '__version__ = "{}"')):
            path = dest / rel
            text = path.read_text()
            from gpu_gate import __version__

            assert pattern.format(__version__) in text, rel
            path.write_text(text.replace(pattern.format(__version__), pattern.format(version)))
    return dest


def build(kind: str, tree: Path, out: Path) -> Path:
    """``kind`` "wheel" or "sdist": the built file in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    code = f"import setuptools.build_meta as b; print(b.build_{kind}({str(out)!r}))"
    res = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out / res.stdout.strip().splitlines()[-1]


def wheel_and_sdist(tmp: Path, version: str | None = None) -> tuple[Path, Path]:
    tree = source_tree(tmp / "src", version)
    return build("wheel", tree, tmp / "dist"), build("sdist", tree, tmp / "dist")
