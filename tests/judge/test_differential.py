"""Judge the change: the base's code runs the same cases as the head's, against one reference.

A failure the base's code has too is the repository's debt (reported, not blocking by default); a
failure only the head has blocks; a failure the head no longer has is reported as fixed; and a head
that is several times less accurate than the base on the same case blocks even inside the tolerance.
Real git repositories, real sandboxed workers (the base's in a work tree of its own), on the CPU.
The kernels are plain torch; `csrc/rows.cu` is the changed kernel file the spec covers.
"""
from __future__ import annotations

import json
from pathlib import Path

from conftest_git import GitRepo
from test_cli import gate

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 8, growth: false, shrink: false, seed: 7}
"""

# A row sum, as a library would write its wrapper. The exact one accumulates in float64.
EXACT = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"
# Sums in float32 one column after another: correct to the tolerance, and several times less
# accurate than the exact one (what a kernel that moves its accumulator does).
SEQUENTIAL = """\
import torch


def row_sum(x):
    acc = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for j in range(x.shape[-1]):
        acc = acc + x[..., j]
    return acc
"""
# Wrong for rows longer than 64 (a "fast path" that drops the tail).
TRUNCATED = "def row_sum(x):\n    return x[..., :64].double().sum(-1).to(x.dtype)\n"
# Wrong for rows of 100 or more, another way.
OFF_BY_ONE = "def row_sum(x):\n    return (x[..., 1:] if x.shape[-1] >= 100 else x).double().sum(-1).to(x.dtype)\n"

SPEC = """\
import torch
import gpu_gate as gg
from mylib.ops import row_sum


@gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 256, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x.sum(-1),
         covers=["csrc/rows.cu"],
         devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""

KERNEL = "__global__ void rows(const float* x, float* y, int n) { /* row sums */ }\n"


def _repo(make_repo, ops: str, policy: str = POLICY, spec: str = SPEC) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": policy, "mylib/__init__.py": "", "mylib/ops.py": ops,
                           "csrc/rows.cu": KERNEL, "gate/rows_gate.py": spec})
    r.branch("feature")
    return r


def _pr(r: GitRepo, ops: str | None) -> None:
    files: dict[str, str | bytes] = {"csrc/rows.cu": KERNEL.replace("int n)", "int n, int tuned)")}
    if ops is not None:
        files["mylib/ops.py"] = ops
    r.commit("pull request", files)


def _check(r: GitRepo, *args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", *args, cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p.returncode, p.stdout + p.stderr + report, results


def _findings(results: dict) -> list[dict]:  # type: ignore[type-arg]
    return [f for r in results.get("results", []) if r["check"] == "equivalence" for f in r["findings"]]


def _changes(results: dict) -> dict[str, set[str]]:  # type: ignore[type-arg]
    out: dict[str, set[str]] = {}
    for f in _findings(results):
        if f["details"].get("change"):
            out.setdefault(f["details"]["change"], set()).add(f["kind"])
    return out


def _note(results: dict) -> str:  # type: ignore[type-arg]
    return next(f["message"] for f in _findings(results) if f["kind"] == "differential")


def test_a_bug_the_change_brings_is_new_and_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, EXACT)
    _pr(r, TRUNCATED)
    code, text, results = _check(r)
    assert code == 1, text
    assert _changes(results).get("new") == {"mismatch"}, _findings(results)
    assert "pre-existing" not in _changes(results)
    assert "(new: the base's code passes this case)" in text
    assert "compared with the base's code" in _note(results)


def test_a_bug_the_base_has_too_is_debt_and_does_not_block(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, TRUNCATED)
    _pr(r, None)  # the change touches the kernel file, not the bug
    code, text, results = _check(r)
    assert code == 0, text
    assert _changes(results) == {"pre-existing": {"mismatch"}}, _findings(results)
    assert "### Pre-existing failures (the base's code fails them too)" in text
    assert "the repository's debt" in text
    assert "compared with the base's code" in _note(results) and " on 8 of 8 cases" in _note(results)
    assert "### Blocking" not in text or "mismatch" not in text.split("### Blocking")[1].split("###")[0]


def test_the_bases_code_has_caches_of_its_own(make_repo) -> None:  # type: ignore[no-untyped-def]
    """A wrapper that keeps a JIT cache (as Triton and CuPy do) runs at the base as at the head: each
    worker's cache directory is its own, writable in its sandbox."""
    cached = ("import os\nimport pathlib\n\n\n" + TRUNCATED.replace(
        "def row_sum(x):\n", "def row_sum(x):\n    d = pathlib.Path(os.environ.get('XDG_CACHE_HOME') or pathlib.Path.home() / '.cache') / 'mylib'\n"
                             "    d.mkdir(parents=True, exist_ok=True)\n    (d / 'kernel.bin').write_text('jit')\n"))
    r = _repo(make_repo, cached)
    _pr(r, None)
    code, text, results = _check(r)
    assert code == 0, text
    assert _changes(results) == {"pre-existing": {"mismatch"}}, _findings(results)
    assert "refused" not in _note(results)


def test_the_base_policy_can_make_debt_block(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, TRUNCATED, POLICY + "preexisting: fail\n")
    _pr(r, None)
    code, text, results = _check(r)
    assert code == 1, text
    assert _changes(results) == {"pre-existing": {"mismatch"}}
    assert "(blocks: `preexisting: fail`)" in text


def test_the_head_cannot_turn_debt_into_a_pass_by_policy(make_repo) -> None:  # type: ignore[no-untyped-def]
    """`preexisting` is read from the base: a pull request that relaxes it is a weakening."""
    r = _repo(make_repo, TRUNCATED, POLICY + "preexisting: fail\n")
    r.commit("pull request", {".gpu-gate.yml": POLICY + "preexisting: warn\n",
                              "csrc/rows.cu": KERNEL.replace("int n)", "int n, int tuned)")})
    code, text, _ = _check(r)
    assert code == 1, text
    assert "rules weakened by this change: preexisting: fail -> warn" in text


def test_a_different_bug_on_top_of_debt_is_new(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The base drops the tail beyond 64; the head also drops the first column. On the cases where
    the base passes (rows of 64 or fewer), the head's failures are this change's, and block."""
    r = _repo(make_repo, TRUNCATED)
    _pr(r, TRUNCATED.replace("x[..., :64]", "x[..., 1:65]"))
    code, text, results = _check(r)
    assert code == 1, text
    assert "mismatch" in _changes(results).get("new", set()), _findings(results)
    assert "(new: the base's code passes this case)" in text


def test_a_fix_is_reported_as_fixed(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, TRUNCATED)
    _pr(r, EXACT)
    code, text, results = _check(r)
    assert code == 0, text
    assert _changes(results) == {"fixed": {"mismatch"}}, _findings(results)
    assert "### Fixed by this change" in text and "the head's code passes them" in text


def test_less_accurate_inside_the_tolerance_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, EXACT)
    _pr(r, SEQUENTIAL)
    code, text, results = _check(r)
    assert code == 1, text
    assert "less-accurate" in _changes(results).get("new", set()), _findings(results)
    assert "less accurate than the base's code on the same case" in text


def test_the_same_accuracy_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: a change that computes the same sums another way, as accurately."""
    r = _repo(make_repo, EXACT)
    _pr(r, "def row_sum(x):\n    return x.double().flip(-1).sum(-1).to(x.dtype)\n")
    code, text, results = _check(r)
    assert code == 0, text
    assert not _changes(results), _findings(results)
    assert "0 new, 0 pre-existing and 0 fixed" in _note(results)


def test_a_new_kernel_has_no_base_and_absolute_rules_apply(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The spec exists at the base but its wrapper does not import there: judged absolutely, said so."""
    r = _repo(make_repo, EXACT)
    r.git("checkout", "-q", "main")
    r.commit("rename", {"mylib/ops.py": EXACT.replace("row_sum", "old_sum")})
    r.git("checkout", "-q", "feature")
    r.git("rebase", "-q", "main")
    _pr(r, TRUNCATED)
    code, text, results = _check(r)
    assert code == 1, text
    assert "not compared with the base's code: the spec does not import against the base's code" in _note(results)
    assert not _changes(results)


def test_a_base_that_crashes_is_dropped_not_trusted(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The base's code kills its worker on the first case: the head is judged by absolute rules."""
    crash = "import os\n\n\ndef row_sum(x):\n    os._exit(3)\n"
    r = _repo(make_repo, crash)
    _pr(r, TRUNCATED)
    code, text, results = _check(r)
    assert code == 1, text
    assert "the base's code crashed its worker on case c0000" in _note(results)
    assert not _changes(results).get("pre-existing")


def test_without_a_base_nothing_is_differential(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`gpu-gate check --all` on one commit: absolute rules, no note about a base."""
    r = _repo(make_repo, TRUNCATED)
    p = gate("check", "--all", "--cpu", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    results = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())
    assert not _changes(results)
    assert not any(f["kind"] == "differential" for f in _findings(results))


# --- results that change from run to run ---------------------------------------------------

# One ulp down, none, or one up, by the roll of a die the seed does not control (an atomic's
# ordering, in effect), never the same twice in a row: two runs of one case always differ, as the
# tests need (a free coin agrees with itself on all eight cases one job in 256: a flaky test).


def _wobbly(offset: str, ulp: int) -> str:
    return ("import os\n\n_last = [0]\n\n\ndef row_sum(x):\n"
            f"    s = x.double().sum(-1).to(x.dtype){offset}\n"
            "    k = _last[0]\n    while k == _last[0]:\n        k = os.urandom(1)[0] % 3 - 1\n"
            f"    _last[0] = k\n    return s * (1 + k * 2.0 ** -{ulp})\n")


WOBBLY = _wobbly("", 23)
DET_SPEC = SPEC.replace('devices=["cuda", "cpu"])', 'devices=["cuda", "cpu"], deterministic=True)')


def _det_repo(make_repo, ops: str) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/ops.py": ops,
                           "csrc/rows.cu": KERNEL, "gate/rows_gate.py": DET_SPEC})
    r.branch("feature")
    return r


def test_results_that_change_at_the_base_too_are_debt(make_repo) -> None:  # type: ignore[no-untyped-def]
    """deterministic=True, and the base's code is not: the head that keeps it so is not blamed, and
    its run-to-run differences are not taken for a loss of accuracy."""
    r = _det_repo(make_repo, WOBBLY)
    _pr(r, None)
    code, text, results = _check(r)
    assert code == 0, text
    changes = _changes(results)
    assert set(changes) == {"pre-existing"}, _findings(results)
    assert "unstable" in changes["pre-existing"] and changes["pre-existing"] <= {"unstable", "address-dependent"}


def test_results_that_change_only_at_the_head_block(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _det_repo(make_repo, EXACT)
    _pr(r, WOBBLY)
    code, text, results = _check(r)
    assert code == 1, text
    assert "unstable" in _changes(results).get("new", set()), _findings(results)


# Off everywhere (the base's debt), and, at the head, by a varying ulp on top: the way an in-place
# kernel whose programs overlap shows, once a change makes their writes disagree. Off by a part in a
# thousand, not by one: the cases' inputs reach magnitudes (1e36) where an added 1.0 is no error.
OFF_BY_ONE_EVERYWHERE = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype) * (1 + 2.0 ** -10)\n"
OFF_AND_WOBBLY = _wobbly(" * (1 + 2.0 ** -10)", 20)


def test_results_that_vary_where_the_base_is_already_wrong_are_the_same_debt(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _det_repo(make_repo, OFF_BY_ONE_EVERYWHERE)
    _pr(r, OFF_AND_WOBBLY)
    code, text, results = _check(r)
    assert code == 0, text
    changes = _changes(results)
    assert "new" not in changes, _findings(results)
    assert {"mismatch", "unstable"} <= changes["pre-existing"], changes


def test_results_that_vary_where_the_base_is_right_block(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the same head on a base that gets every row right."""
    r = _det_repo(make_repo, EXACT)
    _pr(r, OFF_AND_WOBBLY)
    code, text, results = _check(r)
    assert code == 1, text
    assert {"mismatch", "unstable"} <= _changes(results).get("new", set()), _findings(results)


def test_shrinking_keeps_a_new_failure_new(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The base is wrong on short rows only; the head is wrong on every row. Shrunk without the base,
    the head's failure would end on a short row, where the base fails too, and read as debt: the
    shrunk case must be one the base passes."""
    import re

    base = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype) + (1.0 if x.shape[-1] <= 16 else 0.0)\n"
    head = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype) + 1.0\n"
    r = _repo(make_repo, base, POLICY.replace("shrink: false", "shrink: true"))
    _pr(r, head)
    code, text, results = _check(r)
    assert code == 1, text
    (new,) = [f for f in _findings(results) if f["details"].get("change") == "new" and f["kind"] == "mismatch"]
    n = int(re.search(r"\bn=(\d+)", new["details"]["case"]).group(1))  # type: ignore[union-attr]
    assert n == 17, new["details"]["case"]  # the smallest row the base gets right


def test_the_sanitizer_jobs_run_the_bases_code_too(make_repo) -> None:  # type: ignore[no-untyped-def]
    """memcheck, racecheck, synccheck and initcheck of a spec the base has are differential (on a
    GPU the base's worker runs under the same tool: `tests/gpu/test_differential_gpu.py`); so is
    the compile check of a kernel file the base has (what it reads from the compiled code is
    compared with the base's build: `tests/commands/test_compiled_offsets_gate.py`)."""
    r = _repo(make_repo, EXACT, POLICY.replace("  memcheck: off\n", "  memcheck: required\n")
              .replace("  racecheck: off\n", "").replace("  compile: off\n", ""))
    _pr(r, None)
    plan = json.loads(gate("plan", "--base", "main", cwd=r.path).stdout)
    differential = {j["check"]: "base_commit" in j["options"] for j in plan["jobs"]}
    assert differential == {"equivalence": True, "memcheck": True, "racecheck": True, "compile": True}, differential
    assert len({j["options"].get("base_commit") for j in plan["jobs"]}) == 1


def test_far_worse_than_a_base_that_fails_too_is_new_and_says_so(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The base is off by 0.1%, the head by 10%: both fail the tolerance, but the head's failure is
    this change's doing (regression_factor), and the report does not claim the base passes."""
    r = _repo(make_repo, "def row_sum(x):\n    return (x.double().sum(-1) * 1.001).to(x.dtype)\n")
    _pr(r, "def row_sum(x):\n    return (x.double().sum(-1) * 1.1).to(x.dtype)\n")
    code, text, results = _check(r)
    assert code == 1, text
    assert "mismatch" in _changes(results).get("new", set()), _findings(results)
    assert "(new: the base's code fails this case too, far less)" in text
    assert "(new: the base's code passes this case)" not in text


def test_the_timing_counts_the_bases_own_runs_once(make_repo) -> None:  # type: ignore[no-untyped-def]
    """Each step of the cases in the job's timing is the head's alone; the base's own calls and
    probes (run in full where the head fails) count in the base's step, not again in the head's."""
    slow = "import time\n\n\ndef row_sum(x):\n    time.sleep(0.2)\n    return x.double().sum(-1).to(x.dtype)\n"
    r = _repo(make_repo, slow)
    _pr(r, TRUNCATED)
    code, text, results = _check(r)
    assert code == 1, text
    timing = next(x["extra"]["timing"] for x in results["results"] if x["check"] == "equivalence")
    steps = timing["steps"]
    # the base's code sleeps on every call, the head's does not: the head's calls are quick
    assert steps["base"] > 2.0, steps
    # the head's failing cases have the base's code called again, twice at least (0.4 s): not here
    assert steps["first_call"] + steps.get("second_call", 0.0) < 0.3, steps


# A scalar loss, the mean of squares, as torch computes it in float32 and as a kernel would in
# another order: as accurate, each a unit of rounding or so from the truth. Its error is one draw,
# not an average over elements: on an H200 a KernelBench cross-entropy submission's scalar loss was
# off by 1.05 epsilons where torch's own was off by 0.05, and was called 20x less accurate.
TORCH_LOSS = "def mean_sq(x):\n    return (x * x).mean()\n"
OTHER_ORDER_LOSS = "def mean_sq(x):\n    return (x * x).flip(-1).t().sum() / x.numel()\n"
# The same loss accumulated in bfloat16: really less accurate, on a scalar too.
LOW_PRECISION_LOSS = "def mean_sq(x):\n    return ((x * x).to(torch.bfloat16).sum(dtype=torch.bfloat16) / x.numel()).float()\n"

LOSS_SPEC = """\
import gpu_gate as gg
from mylib.ops import mean_sq


@gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 256, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: (x * x).mean(),
         covers=["csrc/rows.cu"],
         devices=["cuda", "cpu"])
def mean_sq_gate(x):
    return mean_sq(x)
"""


def test_a_scalar_output_as_accurate_another_way_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, TORCH_LOSS, policy=POLICY.replace("cases: 8", "cases: 24"), spec=LOSS_SPEC)
    _pr(r, OTHER_ORDER_LOSS)
    code, text, results = _check(r)
    assert code == 0, text
    assert "less-accurate" not in _changes(results).get("new", set()), _findings(results)


def test_a_scalar_output_accumulated_in_low_precision_is_less_accurate(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, TORCH_LOSS, policy=POLICY.replace("cases: 8", "cases: 24"), spec=LOSS_SPEC)
    _pr(r, "import torch\n\n\n" + LOW_PRECISION_LOSS)
    code, text, results = _check(r)
    assert code == 1, text
    assert _changes(results).get("new"), _findings(results)
