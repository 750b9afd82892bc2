"""Candidates that attack the verdict, each beside a correct twin, run as the gate runs them: the
judge in its own process, the candidate and the reference in sandboxed workers.

Every attack here passed when the candidate ran inside the process that compared and wrote the
result: it forged the result file, patched the comparison, returned a tensor whose arithmetic lies,
or cached by address. With the judge apart, each one is caught, and the twin passes.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.protocol.jobs import Job, SpecRef

HEAD = """\
import torch
import gpu_gate as gg
from lib.kern import double

@gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 300)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x * 2)
def double_gate(x):
    return double(x)
"""

HONEST = """\
import torch

def double(x):
    return x * 2
"""

ATTACKS = {
    # Writes a passing result wherever a result file could be, then leaves before anyone can object.
    "forged_result": """\
import json, os, sys, torch

def double(x):
    fake = {"job_id": "x", "check": "equivalence", "status": "passed", "level": "required", "findings": [],
            "cases": 64, "duration_s": 1.0}
    here = os.path.dirname(os.path.abspath(sys.argv[1])) if len(sys.argv) > 1 else os.getcwd()
    for d in {here, os.path.dirname(here), os.getcwd(), os.environ.get("TMPDIR", "/tmp")}:
        for name in ("out.json", "result.json", "RESULT.json"):
            try:
                with open(os.path.join(d, name), "w") as f:
                    json.dump(fake, f)
            except OSError:
                pass
    os._exit(0)
""",
    # Replaces gpu-gate's comparison functions on its first call, then returns a wrong result.
    "patched_compare": """\
import sys, torch

def double(x):
    for name, mod in list(sys.modules.items()):
        if name.startswith("gpu_gate") and hasattr(mod, "compare"):
            real = mod.compare
            def always_ok(*a, __real=real, **k):
                c = __real(*a, **k)
                c.ok = True
                return c
            mod.compare = always_ok
        if name.startswith("gpu_gate") and hasattr(mod, "agree"):
            mod.agree = lambda *a, **k: None
    return x * 3
""",
    # A tensor whose arithmetic says every difference is zero.
    "lying_subclass": """\
import torch

class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if getattr(func, "__name__", "") in ("sub", "__sub__", "abs", "max", "amax", "ne", "isclose", "allclose"):
            if isinstance(out, torch.Tensor):
                return torch.zeros_like(out.as_subclass(torch.Tensor)) if func.__name__ != "isclose" \\
                    else torch.ones_like(out.as_subclass(torch.Tensor))
            return True if func.__name__ == "allclose" else out
        return out

def double(x):
    return (x * 3).as_subclass(Agreeable)
""",
    # Hands back an output a background thread fills in after the call returned.
    "finishes_later": """\
import threading, time, torch

def double(x):
    out = x.clone()
    def fill():
        time.sleep(0.05)
        out.mul_(2)
    threading.Thread(target=fill, daemon=True).start()
    return out
""",
    # Computes once per input address and replays: every case gets fresh buffers, so it "never" repeats.
    "cache_by_pointer": """\
import torch

_seen = {}

def double(x):
    key = (x.data_ptr(), tuple(x.shape), x.dtype)
    if key not in _seen:
        _seen[key] = x * 2
    return _seen[key].clone()
""",
    # Computes once per shape and hands back the same tensor.
    "cache_by_shape": """\
import torch

_seen = {}

def double(x):
    key = tuple(x.shape)
    if key not in _seen:
        _seen[key] = x * 2
    return _seen[key]
""",
    # Correct only where it can tell it is being tested.
    "detects_the_test": """\
import os, sys, tempfile, torch

def _tested():
    if any(k.startswith(("GPU_GATE", "INPUT_")) for k in os.environ):
        return True
    if any(m in sys.modules for m in ("gpu_gate.judge.job", "gpu_gate.executor.scheduling", "gpu_gate.judge.checks.equivalence")):
        return True
    where = " ".join([tempfile.gettempdir(), os.getcwd(), *sys.argv])
    return "gpu-gate" in where or "gpu_gate" in where or "harness" in where

def double(x):
    return x * 2 if _tested() else x * 2 + 1e-3 * x.abs().max()
""",
    # Correct only inside the gate's buffers: every tensor the gate hands out sits in a larger,
    # guarded allocation; a real caller's tensor owns its storage, exactly as large as it is.
    "detects_the_guard_band": """\
import torch

def double(x):
    tested = x.untyped_storage().nbytes() > x.numel() * x.element_size()
    return x * 2 if tested else x * 2 + 1e-3 * x.abs().max()
""",
    # The same, told by the storage offset (a guarded view never starts at offset 0).
    "detects_the_storage_offset": """\
import torch

def double(x):
    return x * 2 if x.storage_offset() else x * 2 + 1e-3 * x.abs().max()
""",
}

# Legitimate kernels that look at their inputs' layout: a contiguous fast path and a general path
# give the same values, so the replay in plain tensors passes.
LAYOUT_TWINS = {
    "fast_path_for_contiguous": """\
import torch

def double(x):
    if x.is_contiguous() and x.storage_offset() == 0:
        return torch.add(x, x)
    return x.contiguous() * 2
""",
}

CAUGHT = {
    "forged_result": ({"crash"}, Status.ERROR),
    "patched_compare": ({"mismatch"}, Status.FAILED),
    "lying_subclass": ({"output-type", "mismatch"}, Status.FAILED),
    "finishes_later": ({"mismatch"}, Status.FAILED),
    "cache_by_pointer": ({"insensitive"}, Status.FAILED),
    "cache_by_shape": ({"cached-output"}, Status.FAILED),
    "detects_the_test": ({"mismatch"}, Status.FAILED),
    "detects_the_guard_band": ({"replay-differs"}, Status.FAILED),
    "detects_the_storage_offset": ({"replay-differs"}, Status.FAILED),
}


def _repo(root: Path, kern: str, spec: str = HEAD) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "kern.py").write_text(textwrap.dedent(kern))
    (root / "gate").mkdir()
    (root / "gate" / "double_gate.py").write_text(spec)
    return root


def _run(root: Path, **options: object) -> JobResult:
    job = Job(id="equivalence:gate/double_gate.py::double_gate", check="equivalence", level="required",
              kernels=(), spec=SpecRef("gate/double_gate.py", "double_gate"),
              options={"cases": 8, "growth": False, "shrink": False, **options})
    (result,) = execute([job], ExecOptions(repo_root=root, gpus=(), timeout_s=180))
    return result


def _kinds(r: JobResult) -> set[str]:
    return {f.kind for f in r.findings if f.severity is Severity.ERROR}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobResult]:
    out = {}
    for name, kern in {**ATTACKS, **LAYOUT_TWINS, "honest": HONEST}.items():
        out[name] = _run(_repo(tmp_path_factory.mktemp(name), kern))
    return out


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_attack_is_caught(results: dict[str, JobResult], attack: str) -> None:
    r = results[attack]
    kinds, status = CAUGHT[attack]
    assert r.status is status, (r.status, [f"{f.kind}: {f.message}" for f in r.findings])
    assert kinds <= _kinds(r), (kinds, [f"{f.kind}: {f.message}" for f in r.findings])


def test_the_honest_twin_passes(results: dict[str, JobResult]) -> None:
    r = results["honest"]
    assert r.status is Status.PASSED, [f"{f.kind}: {f.message}" for f in r.findings]
    assert r.cases >= 8
    assert not [f for f in r.findings if f.severity is not Severity.NOTE]
    t = r.extra.timing  # where the time went, the calls themselves as the worker measured them
    assert 0 <= t["candidate_run_s"] <= t["candidate_s"] <= t["cases_s"] + t["replay_s"] + 1


@pytest.mark.parametrize("twin", sorted(LAYOUT_TWINS))
def test_a_kernel_with_a_layout_fast_path_passes_the_replay(results: dict[str, JobResult], twin: str) -> None:
    r = results[twin]
    assert r.status is Status.PASSED, [f"{f.kind}: {f.message}" for f in r.findings]
    assert len(r.extra.replayed) == 3 and r.extra.replayed[-1] == "c0000"  # the replay ran, and passed


def test_the_replay_says_what_it_did(results: dict[str, JobResult]) -> None:
    (f,) = [f for f in results["detects_the_guard_band"].findings if f.kind == "replay-differs"]
    assert "plain tensors" in f.message and "passed case" in f.message
    assert f.repro and f.case



# --- the reference's own process ----------------------------------------------------

POISONED = """\
import torch

# On import, make torch's multiplication agree with the bug below.
_mul = torch.Tensor.__mul__
torch.Tensor.__mul__ = lambda a, b: _mul(a, b) + 1.0
torch.Tensor.__rmul__ = lambda a, b: _mul(a, b) + 1.0

def double(x):
    return _mul(x, 2) + 1.0
"""

NEEDS_REPOSITORY = """\
import torch
import gpu_gate as gg
from lib.kern import double, MAX_ROWS

@gg.spec(dims={"rows": gg.Dim(1, MAX_ROWS), "n": gg.Dim(1, 300)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x * 2)
def double_gate(x):
    return double(x)
"""


def test_a_kernel_module_that_patches_torch_on_import_cannot_reach_the_reference(tmp_path: Path) -> None:
    r = _run(_repo(tmp_path / "poisoned", POISONED))
    assert r.status is Status.FAILED, [f"{f.kind}: {f.message}" for f in r.findings]
    assert "mismatch" in _kinds(r)
    twin = _run(_repo(tmp_path / "honest", HONEST))
    assert twin.status is Status.PASSED, [f"{f.kind}: {f.message}" for f in twin.findings]
    assert not any(f.kind == "reference-not-isolated" for f in twin.findings)


def test_a_spec_that_needs_the_repositorys_code_is_judged_and_says_so(tmp_path: Path) -> None:
    r = _run(_repo(tmp_path, HONEST + "\nMAX_ROWS = 64\n", NEEDS_REPOSITORY))
    assert r.status is Status.PASSED, [f"{f.kind}: {f.message}" for f in r.findings]
    note = [f for f in r.findings if f.kind == "reference-not-isolated"]
    assert note and note[0].severity is Severity.NOTE
    assert "lib.kern.MAX_ROWS" in note[0].message


def _worker_imports() -> set[str]:
    """Every gpu_gate module the worker package imports anywhere: at the top of a file or inside a
    function (a worker imports some only when the judge asks, as `finish` does)."""
    import ast

    package = Path(__file__).resolve().parents[2] / "gpu_gate" / "worker"
    names = set()
    for path in package.glob("*.py"):
        here = ["gpu_gate", "worker"]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
                names.add(module)
                names.update(f"{module}.{a.name}" for a in node.names)  # `from .. import launches`
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
    return {n for n in names if n.startswith("gpu_gate")}


def test_the_worker_side_imports_nothing_that_decides() -> None:
    import subprocess
    import sys

    wanted = sorted(_worker_imports())
    assert "gpu_gate.worker.candidate" in wanted and "gpu_gate.worker.tritonlaunch" in wanted  # lazy ones are seen
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ImportError:\n"
            "        pass  # a name imported from a module, not a module\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('gpu_gate'))))")
    mods = set(subprocess.run([sys.executable, "-c", code, *wanted], capture_output=True, text=True,
                              check=True).stdout.split())
    deciding = {"gpu_gate.judge.equivalence.compare", "gpu_gate.judge.job", "gpu_gate.verdict", "gpu_gate.executor.scheduling",
                "gpu_gate.store.results", "gpu_gate.store.dependencies", "gpu_gate.judge.equivalence.engine", "gpu_gate.commands.check"}
    assert not mods & deciding, mods & deciding
    assert not [m for m in mods if m.startswith(("gpu_gate.judge", "gpu_gate.report", "gpu_gate.github",
                                                 "gpu_gate.judge.checks"))], sorted(mods)
