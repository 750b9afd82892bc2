"""On a GPU runner the compile check reads the PTX of the Triton that runs the kernels. Triton
3.6 compiles tl.atomic_xchg(lock, 0) straight after the stores: the no-barrier spin lock is
flagged at its release line, and its twin with tl.debug_barrier() is clean; a ready flag raised
with a plain store is flagged whatever the version."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpu_gate.findings import Severity

from test_compiled_races import compile_job  # noqa: E402  (tests/ is on sys.path)


def test_lock_release_without_barrier_on_this_toolchain(tmp_path: Path) -> None:
    import triton

    r = compile_job("tt_locks.py", tmp_path)
    locks = [(f.line, f.severity) for f in r.findings if f.kind == "lock-release-without-barrier"]
    if triton.__version__.startswith(("3.6", "3.5", "3.4")):
        assert locks == [(22, Severity.ERROR)], [f.message for f in r.findings]
    else:
        pytest.skip(f"triton {triton.__version__} puts its own barrier before the release: nothing to find")


def test_a_flag_raised_by_a_plain_store_on_this_toolchain(tmp_path: Path) -> None:
    """The ready flag of tt_flags.py, compiled by the Triton that runs the kernels here: the plain
    store is flagged at its line, the barrier-and-release twin is clean."""
    r = compile_job("tt_flags.py", tmp_path)
    flags = [(f.line, f.details.get("kernel")) for f in r.findings if f.kind == "lock-release-without-barrier"]
    assert flags == [(13, "split_sum_flag_store")], [f.message for f in r.findings]
