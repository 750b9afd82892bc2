"""Shared test configuration. GPU tests live in tests/gpu and skip cleanly without a GPU.

The tests mirror the package (``tests/judge``, ``tests/worker``, ``tests/protocol``, ...). Some test
modules share helpers with a module of another folder (``gate`` of ``commands/test_cli.py``, the
report fixtures): every folder is on ``sys.path``, as ``tests/`` itself is, so that those imports do
not depend on which module pytest happened to import first.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

# The suite runs as CI does (issue 40): a GPU-only check that cannot run fails closed. The tests of
# a local run, where such checks are listed as not run here and do not fail, unset CI themselves.
os.environ.setdefault("CI", "true")
# OpenMP's threads sleep between parallel regions, as in the gate's judge (gpu_gate.executor.argv.
# WAIT_POLICY), in this process's torch (the in-process jobs) and, as a runner's own setting, in every
# gate the tests start: on CI's few cores a spinning thread after each region held a core another test
# process needed (the in-process corpora ran twice as long).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# GPU-memory ledgers (gpu_gate.executor.reservations) are shared by every gate on a runner: the tests'
# fake GPUs keep theirs in a directory of this test process's own, so that test processes running
# side by side (pytest-xdist) never reserve each other's fake GPU "0". Gates a test starts inherit it.
if "GPU_GATE_RUNNER_DIR" not in os.environ:
    import tempfile

    os.environ["GPU_GATE_RUNNER_DIR"] = tempfile.mkdtemp(prefix="gpu-gate-runner-tests-")

_HERE = Path(__file__).resolve().parent
for _folder in sorted(p for p in _HERE.iterdir() if p.is_dir() and list(p.glob("test_*.py"))):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))

from conftest_git import GitRepo, git_env, make_repo, repo  # noqa: E402,F401 - fixtures for every test module


# Modules that each take minutes on CI's two cores (from the durations CI prints: the bundled audits,
# the interpreter corpora, the corpus wrappers, the demo's runs, the adversarial corpus). Under
# ``--dist loadfile`` a module is handed out whole, in collection order: started last, one of them ran
# alone for its minutes while the other core idled. They are collected first; the rest keep their order.
LONG_MODULES = (
    "audit/test_audit_kernelbench.py",
    "judge/test_equivalence_triton_interpreter.py",
    "worker/test_interpreter_low_precision_corpus.py",
    "judge/test_corpus_wrappers.py",
    "commands/test_cli_conventions.py",
    "audit/test_audit_sol.py",
    "judge/test_judge_adversarial.py",
    "judge/test_case_floor.py",
    "commands/test_selection.py",
)


def pytest_collection_modifyitems(config: object, items: list[object]) -> None:
    def rank(item: object) -> int:
        path = Path(str(getattr(item, "path", ""))).as_posix()
        return next((i for i, m in enumerate(LONG_MODULES) if path.endswith("tests/" + m)), len(LONG_MODULES))

    items[:] = sorted(items, key=rank)  # stable: the order within each module, and of the rest, is kept
