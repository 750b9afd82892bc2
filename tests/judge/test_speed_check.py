"""The speed check (issue 44, part 2) on real repositories and real sandboxed workers, on the CPU:
the base's code and the head's timed on the same cases in interleaved rounds, head/base time with
its confidence interval in the report, and a slow-down beyond the policy's threshold red where the
check is required. The CPU's wall clock stands in for CUDA events here (tests/gpu times a GPU)."""
from __future__ import annotations

from test_differential import KERNEL, SPEC, _check

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  equivalence: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  speed: {level: %s, cases: 1, rounds: 8, repeats: 3, warmup: 1, threshold: 0.5}
"""

FAST = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"
# The same sum, renamed: a change that does nothing to the time
RENAMED = "def row_sum(values):\n    return values.double().sum(-1).to(values.dtype)\n"
# A "tuning" that makes every call wait 20 ms: many times the sum's own time on a 64 x 256 case
SLOWER = "import time\n\n\ndef row_sum(x):\n    time.sleep(0.02)\n    return x.double().sum(-1).to(x.dtype)\n"


def _gate(make_repo, head: str, level: str = "required", name: str = "proj", policy: str = POLICY,  # type: ignore[no-untyped-def]
          spec: str = SPEC, base: str = FAST):
    r = make_repo(name, {".gpu-gate.yml": policy % level, "mylib/__init__.py": "", "mylib/ops.py": base,
                         "csrc/rows.cu": KERNEL, "gate/rows_gate.py": spec})
    r.branch("feature")
    r.commit("pull request", {"mylib/ops.py": head, "csrc/rows.cu": KERNEL.replace("int n)", "int n, int tuned)")})
    return _check(r)


def _speed(results: dict) -> list[dict]:  # type: ignore[type-arg]
    return [f for r in results.get("results", []) if r["check"] == "speed" for f in r["findings"]]


def test_a_change_that_makes_the_kernel_slower_is_red_with_its_interval(make_repo) -> None:  # type: ignore[no-untyped-def]
    code, text, results = _gate(make_repo, SLOWER)
    assert code == 1, text
    slower = [f for f in _speed(results) if f["kind"] == "slower"]
    assert len(slower) == 1, _speed(results)
    d = slower[0]["details"]
    assert d["low"] > 1.5 and d["low"] <= d["ratio"] <= d["high"] and d["pairs"] == 8, d
    assert "slower than the policy allows" in slower[0]["message"] and "interval" in slower[0]["message"]
    note = next(f for f in _speed(results) if f["kind"] == "speed")
    assert "8 interleaved rounds" in note["message"] and "wall" in note["message"], note["message"]


def test_the_same_slow_down_is_reported_not_blocking_where_the_check_is_advisory(make_repo) -> None:  # type: ignore[no-untyped-def]
    code, text, results = _gate(make_repo, SLOWER, level="advisory")
    assert code == 0, text
    assert [f["kind"] for f in _speed(results) if f["kind"] == "slower"] == ["slower"], _speed(results)


def test_a_change_that_does_nothing_to_the_time_is_green_with_its_figures(make_repo) -> None:  # type: ignore[no-untyped-def]
    """With a production shape in the policy, that shape is what is timed (before any fuzzed case)."""
    with_shape = POLICY.replace("threshold: 0.5}", "threshold: 0.5, shapes: [{rows: 48, n: 200}]}")
    assert with_shape != POLICY
    code, text, results = _gate(make_repo, RENAMED, policy=with_shape)
    assert code == 0, text
    notes = _speed(results)
    assert [f["kind"] for f in notes] == ["speed"], notes
    assert not [f for f in notes if f["kind"] == "implausible-speedup"], notes  # a legitimate no-op is not suspect
    d = notes[0]["details"]
    assert d["low"] <= 1.5 and d["low"] <= d["ratio"] <= d["high"], d
    assert "head/base time" in notes[0]["message"]
    assert "### Speed: this change against the base" in text and "head/base time" in text  # the PR comment
    assert "[rows=48, n=200]" in notes[0]["message"], notes[0]["message"]


BIG_SPEC = SPEC.replace('"rows": gg.Dim(1, 64)', '"rows": gg.Dim(1, 1 << 20)')


def test_a_production_shape_too_large_to_time_here_is_a_warning_not_a_note(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The policy names a production shape this runner cannot hold (a million rows: over the case
    budget on the CPU): the check times its own smaller cases and says, as a warning, that the shape
    asked for was not timed (before, only the note's last sentence said it, under a green check).
    Advisory: the timed cases are the largest the budget allows (a million rows), where the CPU's wall
    clock once put the same sum, renamed, at 10x the base's (allocations of 8 MiB a call, served
    differently in two processes: fixed since by the workers' steady heap, tests/worker/test_heap.py;
    in ten runs under load the ratio was 0.33 twice without it, 0.97-1.24 with it); the GPU times with
    CUDA events and torch's caching allocator."""
    assert BIG_SPEC != SPEC
    policy = POLICY.replace("threshold: 0.5}", "threshold: 0.5, shapes: [{rows: 1048576, n: 256}]}")
    code, text, results = _gate(make_repo, RENAMED, level="advisory", policy=policy, spec=BIG_SPEC)
    assert code == 0, text
    found = {f["kind"]: f for f in _speed(results)}
    assert found["shape-not-timed"]["severity"] == "warning", found
    assert "rows=1048576, n=256" in found["shape-not-timed"]["message"], found["shape-not-timed"]["message"]
    assert "speed" in found and "head/base time" in found["speed"]["message"], found


def test_a_speed_up_beyond_ten_times_is_a_warning_that_does_not_block(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The base sleeps 20 ms a call, the head does not: far more than ``IMPLAUSIBLE`` times faster at the
    stated confidence, a warning sign (work skipped?) that is said, never blocking, even where required."""
    code, text, results = _gate(make_repo, FAST, base=SLOWER)
    assert code == 0, text
    found = _speed(results)
    implausible = [f for f in found if f["kind"] == "implausible-speedup"]
    assert len(implausible) == 1, found
    f = implausible[0]
    assert f["severity"] == "warning", f
    assert "faster than the base" in f["message"] and "interval" in f["message"], f["message"]
    assert f["details"]["high"] < 0.1, f["details"]
    assert "slower" not in {x["kind"] for x in found}, found
    assert [x for x in found if x["kind"] == "speed"], found  # the figures are still said


def test_a_new_spec_has_no_base_to_time_against_and_says_so(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY % "required", "mylib/__init__.py": "", "mylib/ops.py": FAST})
    r.branch("feature")
    r.commit("a new kernel and its spec", {"gate/rows_gate.py": SPEC, "csrc/rows.cu": KERNEL})
    code, text, results = _check(r)
    assert code == 0, text
    notes = _speed(results)
    assert len(notes) == 1 and "no base code to time against" in notes[0]["message"], notes



GRAD_SPEC = SPEC.replace('reference=lambda x: x.sum(-1),', 'reference=lambda x: x.sum(-1), grads=["x"],')
GRAD_FAST = "def row_sum(x):\n    return x.sum(-1)\n"
GRAD_SLOWER = "import time\n\n\ndef row_sum(x):\n    time.sleep(0.02)\n    return x.sum(-1)\n"


def test_a_backward_is_timed_with_the_same_upstream_gradient(make_repo) -> None:  # type: ignore[no-untyped-def]
    """A spec with ``grads=``: each timed run is the forward and the backward, as training runs them."""
    assert GRAD_SPEC != SPEC
    r = make_repo("proj", {".gpu-gate.yml": POLICY % "required", "mylib/__init__.py": "", "mylib/ops.py": GRAD_FAST,
                           "csrc/rows.cu": KERNEL, "gate/rows_gate.py": GRAD_SPEC})
    r.branch("feature")
    r.commit("pull request", {"mylib/ops.py": GRAD_SLOWER, "csrc/rows.cu": KERNEL.replace("int n)", "int n, int tuned)")})
    code, text, results = _check(r)
    assert code == 1, text
    assert "slower" in {f["kind"] for f in _speed(results)}, _speed(results)


MM_SPEC = """\
import gpu_gate as gg
from mylib.ops import mm


@gg.spec(dims={"m": gg.Dim(1, 64), "k": gg.Dim(1, 256, reduction=True), "n": gg.Dim(1, 64)},
         inputs={"a": gg.Tensor(("m", "k"), dtypes=["float32"]), "b": gg.Tensor(("k", "n"), dtype="like:a")},
         reference=lambda a, b: a @ b, grads=["a", "b"],
         covers=["csrc/rows.cu"], devices=["cuda", "cpu"])
def mm_gate(a, b):
    return mm(a, b)
"""
MM = "import torch\n\n\ndef mm(a, b):\n    return torch.matmul(a, b)\n"


def test_the_reference_operations_of_a_timed_case_are_counted(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The compute side of the hardware floor: the reference worker counts the reference's operations on
    each timed case (forward and backward: three products of m x k x n, 2 FLOP each), and the note says
    the head's rate from them. On the CPU there is no floor to compare with (tests/gpu has the red)."""
    r = make_repo("proj", {".gpu-gate.yml": POLICY % "required", "mylib/__init__.py": "", "mylib/ops.py": MM,
                           "csrc/rows.cu": KERNEL, "gate/rows_gate.py": MM_SPEC})
    r.branch("feature")
    r.commit("pull request", {"mylib/ops.py": MM.replace("(a, b)", "(x, y)"),
                              "csrc/rows.cu": KERNEL.replace("int n)", "int n, int tuned)")})
    code, text, results = _check(r)
    assert code == 0, text
    note = next(f for f in _speed(results) if f["kind"] == "speed")
    import re

    m = re.search(r"\[m=(\d+), k=(\d+), n=(\d+)\].*?the reference's ([0-9.e+-]+) GFLOP: head", note["message"])
    assert m, note["message"]
    rows, k, n = (int(m[i]) for i in (1, 2, 3))
    assert float(m[4]) == float(f"{3 * 2 * rows * k * n / 1e9:.3g}"), note["message"]
