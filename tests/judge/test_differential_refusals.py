"""Refusals judged against the base: what the base's code did with a case the head's code raised on.

- Refused at both commits: the repository's debt. A canonical case refused at both (a kernel that
  no longer compiles for its first dtype with this Triton, as unsloth's cross entropy with bf16
  inputs) no longer stops the job: the other cases run, and a bug on them is still caught.
- Run and passed by the base: the change makes the kernel refuse an input it handled. It blocks,
  even with the default `refusals: warn` (a kernel that handles only the canonical case's shape
  and raises on every other, so that only that case is ever checked, was green before).
Real git repositories and sandboxed workers on the CPU, plain torch wrappers, as in
test_differential.
"""
from __future__ import annotations

from conftest_git import GitRepo
from test_differential import EXACT, POLICY
from test_differential import SPEC as DIFFERENTIAL_SPEC
from test_differential import _changes, _check, _findings, _pr
from test_differential import _repo as _differential_repo

from gpu_gate.worker.calling import first_line

# The spec a user writes for a row sum that their models call in half and single precision: the
# first dtype is the canonical case's.
SPEC = DIFFERENTIAL_SPEC.replace('dtypes=["float32"]', 'dtypes=["float16", "float32"]')
assert SPEC != DIFFERENTIAL_SPEC

# No half-precision path at all, at either commit: it raises, as a Triton kernel that does not
# compile for bf16 inputs raises CompilationError.
NO_HALF = """\
import torch


def row_sum(x):
    if x.dtype == torch.float16:
        raise RuntimeError("at 47:4:\\n    if SCALED: acc = scale * acc\\n    ^\\n"
                           "AssertionError('the then block redefines acc as fp32')")
    return x.double().sum(-1).to(x.dtype)
"""
# The same, and it drops the tail beyond 64 columns: a bug on the cases that do run.
NO_HALF_TRUNCATED = NO_HALF.replace("return x.double()", "return x[..., :64].double()")
# Handles only the shape of its first call (the canonical case's), and raises on every other: a
# kernel specialised to the one case it is sure to be checked on, as one trained against a
# verifier might be. The base's code handles every shape.
FIRST_SHAPE_ONLY = """\
FIRST = []


def row_sum(x):
    if not FIRST:
        FIRST.append(x.shape)
    if x.shape != FIRST[0]:
        raise ValueError("unsupported input")
    return x.double().sum(-1).to(x.dtype)
"""
# Refuses long rows, at the base and at the head: a documented limit of the kernel.
SHORT_ONLY = """\
def row_sum(x):
    if x.shape[-1] > 128:
        raise ValueError("rows longer than 128 are not supported")
    return x.double().sum(-1).to(x.dtype)
"""


def _repo(make_repo, ops: str) -> GitRepo:  # type: ignore[no-untyped-def]
    return _differential_repo(make_repo, ops, spec=SPEC)  # type: ignore[no-any-return]


def _kinds(results: dict, severity: str | None = None) -> set[str]:  # type: ignore[type-arg]
    return {f["kind"] for f in _findings(results) if severity is None or f["severity"] == severity}


def test_a_canonical_case_refused_at_both_commits_is_debt_and_the_rest_runs(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, NO_HALF)
    _pr(r, None)  # the change touches the kernel file, not the wrapper
    code, text, results = _check(r)
    assert code == 0, text
    assert _changes(results) == {"pre-existing": {"refused-canonical", "refused"}}, _findings(results)
    canonical = next(f for f in _findings(results) if f["kind"] == "refused-canonical")
    assert "the base's code refuses it too, so the other cases were run" in canonical["message"]
    # the reason, not only where (the exception's first line ends with a colon)
    assert "RuntimeError: at 47:4: AssertionError('the then block redefines acc as fp32')" in canonical["message"]
    assert "Traceback" in canonical["details"]["traceback"]
    job = next(j for j in results["results"] if j["check"] == "equivalence")
    assert job["cases"] == 8  # every case ran (the job fails, on debt: the verdict is green)
    assert "### Pre-existing failures (the base's code fails them too)" in text


def test_a_bug_behind_a_canonical_case_refused_at_both_is_still_caught(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack on the rule above: refuse the canonical case at the base (or find one that is),
    and slip a bug into the other cases. They run, and the bug is new."""
    r = _repo(make_repo, NO_HALF)
    _pr(r, NO_HALF_TRUNCATED)
    code, text, results = _check(r)
    assert code == 1, text
    assert "mismatch" in _changes(results).get("new", set()), _findings(results)
    assert _changes(results).get("pre-existing") == {"refused-canonical", "refused"}


def test_a_canonical_case_the_change_refuses_is_new_and_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, EXACT)
    _pr(r, NO_HALF)
    code, text, results = _check(r)
    assert code == 1, text
    canonical = next(f for f in _findings(results) if f["kind"] == "refused-canonical")
    assert canonical["details"]["change"] == "new" and canonical["severity"] == "error"
    assert "nothing was verified" in canonical["message"]
    job = next(j for j in results["results"] if j["check"] == "equivalence")
    assert job["cases"] == 1  # the job stops there, as before


def test_a_kernel_that_refuses_everything_at_both_commits_verified_nothing(make_repo) -> None:  # type: ignore[no-untyped-def]
    everything = "def row_sum(x):\n    raise RuntimeError('no path for this GPU')\n"
    r = _repo(make_repo, everything)
    _pr(r, None)
    code, text, results = _check(r)
    assert code == 1, text
    canonical = next(f for f in _findings(results) if f["kind"] == "refused-canonical")
    assert "every other case was refused: nothing was verified" in canonical["message"]
    assert canonical["details"].get("change") is None  # not debt: this run checked nothing


def test_refusing_every_case_but_the_first_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: the head's code is right on the canonical case and raises on every other shape.
    Before, seven refusals were a warning and the gate was green; now the base's code ran and
    passed those cases, and it blocks."""
    r = _repo(make_repo, EXACT)
    _pr(r, FIRST_SHAPE_ONLY)
    code, text, results = _check(r)
    assert code == 1, text
    new = next(f for f in _findings(results) if f["kind"] == "refused" and f["details"].get("change") == "new")
    assert new["severity"] == "error"
    assert "that the base's code runs and passes" in new["message"]
    assert "ValueError: unsupported input" in new["message"]


def test_refusals_the_base_has_too_do_not_block(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The legitimate twin: a documented limit of the kernel, at both commits."""
    r = _repo(make_repo, SHORT_ONLY)
    _pr(r, None)
    code, text, results = _check(r)
    assert code == 0, text
    refused = [f for f in _findings(results) if f["kind"] == "refused"]
    assert refused and all(f["details"]["change"] == "pre-existing" for f in refused), refused
    assert all("as the base's code does" in f["message"] for f in refused)


def test_a_new_refusal_follows_refusals_ignore(make_repo) -> None:  # type: ignore[no-untyped-def]
    """A maintainer who says refusals do not matter gets that, for new ones too."""
    r = _repo(make_repo, EXACT)
    r.git("checkout", "-q", "main")
    r.commit("policy", {".gpu-gate.yml": POLICY + "refusals: ignore\n"})
    r.git("checkout", "-q", "feature")
    r.git("rebase", "-q", "main")
    _pr(r, SHORT_ONLY)
    code, text, results = _check(r)
    assert code == 0, text
    assert "refused" in _changes(results).get("new", set()), _findings(results)


def test_an_exception_that_says_where_before_what_keeps_both() -> None:
    exc = RuntimeError("at 47:4:\n    if SCALED: acc = scale * acc\n    ^\n"
                       "AssertionError('initial value for `acc` is of type bf16')")
    assert first_line(exc) == ("RuntimeError: at 47:4: AssertionError('initial value for `acc` is of "
                               "type bf16')")
    assert first_line(ValueError("rows longer than 128\nsee the docs")) == "ValueError: rows longer than 128"
    assert first_line(ValueError()) == "ValueError"
    assert len(first_line(ValueError("x" * 1000))) == 400
