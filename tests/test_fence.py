"""The trust boundary is the package layout: nothing under ``gpu_gate/worker`` (which imports and runs
code under review) or ``gpu_gate/protocol`` (what crosses between the judge and a worker) reaches a
module that decides. Every import is walked, those inside functions too, transitively."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpu_gate"

# What decides a verdict, runs the gate or publishes it: no worker or protocol module may reach these.
DECIDING = ("gpu_gate.judge", "gpu_gate.policy", "gpu_gate.report", "gpu_gate.verdict", "gpu_gate.github",
            "gpu_gate.rules", "gpu_gate.executor", "gpu_gate.commands", "gpu_gate.cli", "gpu_gate.testing",
            "gpu_gate.pytest_plugin", "gpu_gate.findings", "gpu_gate.record", "gpu_gate.plan")
FENCED = ("gpu_gate.worker", "gpu_gate.protocol")
# The judge never imports code under review, nor the modules that do: nothing under judge/ reaches worker/.
JUDGE, WORKER = ("gpu_gate.judge",), ("gpu_gate.worker",)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in package.rglob("*.py") if "demo_repo" not in p.parts}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every gpu_gate module ``name`` imports, at its top or in a function, by any form of import
    (``importlib.import_module`` of a literal name included)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (here[: len(here) - node.level + 1] if node.level else []) + (node.module or "").split(".")
            mod = ".".join(p for p in base if p)
            # ``from P import a``: the module P.a where there is one, else P itself
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            targets = [str(node.args[0].value)]
        found.update(t for t in targets if t in known)
    return found


def reach(start: str, known: dict[str, Path]) -> dict[str, list[str]]:
    """Every module reachable from ``start``, with the chain of imports that reaches it."""
    chains = {start: [start]}
    todo = [start]
    while todo:
        cur = todo.pop()
        for nxt in sorted(imports_of(cur, known[cur], known)):
            if nxt not in chains:
                chains[nxt] = chains[cur] + [nxt]
                todo.append(nxt)
    return chains


def breaches(package: Path = PACKAGE, fenced: tuple[str, ...] = FENCED, out_of_reach: tuple[str, ...] = DECIDING
             ) -> list[str]:
    """Every chain of imports from a module under ``fenced`` to one under ``out_of_reach``."""
    known = modules(package)
    out = []
    for name in sorted(known):
        if not name.startswith(fenced):
            continue
        for target, chain in reach(name, known).items():
            if target == name or not target.startswith(out_of_reach):
                continue
            out.append(" -> ".join(chain))
    return out


def test_no_worker_or_protocol_module_reaches_one_that_decides() -> None:
    assert breaches() == []


def test_no_judge_module_reaches_a_worker_module() -> None:
    """The judge decides from what its workers send: none of its modules imports one that imports
    code under review (the compile check's judge reads its worker's facts, never its modules)."""
    assert breaches(fenced=JUDGE, out_of_reach=WORKER) == []


def test_the_judges_fence_sees_a_planted_import(tmp_path: Path) -> None:
    """A lazy import of the Triton compiler's module planted in a PTX reader is a breach, named
    with its chain from the compile check."""
    import shutil

    copy = tmp_path / "gpu_gate"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    reader = copy / "judge" / "compiled" / "ptx_offsets.py"
    planted = "\n\ndef _peek() -> None:\n    from ...worker import tritonc  # noqa: F401\n"
    reader.write_text(reader.read_text() + planted)
    found = breaches(copy, JUDGE, WORKER)
    assert "gpu_gate.judge.compiled.ptx_offsets -> gpu_gate.worker.tritonc" in found, found
    assert any(chain.startswith("gpu_gate.judge.checks.compile -> ") and chain.endswith("gpu_gate.worker.tritonc")
               for chain in found), found


def test_the_fence_sees_a_planted_import_even_inside_a_function(tmp_path: Path) -> None:
    """The walk itself: a copy of the package with one lazy import of the judge planted in a worker
    module (two imports away, through a protocol module) is a breach, named with its chain."""
    import shutil

    copy = tmp_path / "gpu_gate"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    wire = copy / "protocol" / "wire.py"
    wire.write_text(wire.read_text() + "\n\ndef _peek() -> None:\n    from ..judge import workers  # noqa: F401\n")
    found = breaches(copy)
    assert any(chain.startswith("gpu_gate.worker.serve -> ") and chain.endswith("gpu_gate.judge.workers")
               for chain in found), found
    assert "gpu_gate.protocol.wire -> gpu_gate.judge.workers" in found


@pytest.mark.parametrize("form", ["import gpu_gate.verdict", "from gpu_gate import policy",
                                  "__import__('gpu_gate.report')", "importlib.import_module('gpu_gate.judge.job')"])
def test_every_form_of_import_is_seen(tmp_path: Path, form: str) -> None:
    import shutil

    copy = tmp_path / "gpu_gate"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    stubs = copy / "worker" / "stubs.py"
    stubs.write_text(stubs.read_text() + f"\n\ndef _peek() -> None:\n    import importlib\n    {form}\n")
    assert any(c.startswith("gpu_gate.worker.stubs -> ") for c in breaches(copy))
