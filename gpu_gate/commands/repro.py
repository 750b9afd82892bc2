"""``gpu-gate repro``: re-run one recorded case of a spec (or its error-growth sweep), as a report's
reproducer names it, judged as the pull request was when ``base`` is given."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from . import output as out
from ..errors import GateError
from ..exitcodes import ExitCode
from .planning import load_policy, policy_in_force, repo_root
from .request import PolicyFile


@dataclasses.dataclass(frozen=True)
class ReproRequest:
    spec: str  # PATH::NAME
    case: str | None = None  # a case token from the report; None: the spec's canonical cases
    check: str = "equivalence"
    growth: str | None = None  # DIM:DTYPE: the error-growth sweep instead of cases
    seed: int | None = None
    base: str | None = None  # judge by the spec, the policy and the truth at this ref's tip, as check does
    repo: Path | None = None
    cpu: bool = False
    job_timeout: float | None = None
    policy: PolicyFile = PolicyFile()


def run(request: ReproRequest) -> int:
    from ..executor.job import run_one
    from ..executor.options import ExecOptions
    from ..executor.slots import detect_gpus
    from ..report.console import progress_line

    from contextlib import nullcontext

    from ..protocol.jobs import TRUTH
    from .head_tree import commit_tree

    repo = repo_root(request.repo)
    job, rules = _job(repo, request)
    gpus = detect_gpus() if not request.cpu else ()
    with commit_tree(repo, rules) if TRUTH in job.options and rules else nullcontext(None) as truth:
        opts = ExecOptions(repo_root=repo, gpus=gpus[:1], timeout_s=request.job_timeout or 600,
                           truth_roots=((rules, truth),) if truth is not None and rules else ())
        r = run_one(job, opts, gpus[0] if gpus else None)
    out.verdict(progress_line(r, 1, 1, r.duration_s, out.colour()))
    for f in r.findings:
        out.say(f"{f.kind}: {f.message}")
    growth = r.extra.growth if request.growth else None
    for curve in (growth.get("curves") or [growth]) if growth else []:
        _say_curve(curve)
    if r.reason:
        out.say(f"reason: {r.reason}")
    return int(ExitCode.PASSED if r.status.value == "passed" else ExitCode.POLICY_BREACHED)


def _say_curve(curve: dict[str, Any]) -> None:
    out.say(f"error by length along {curve['dim']!r} in {curve['dtype']} (slope {curve['slope_candidate']} vs "
            f"torch's {curve['slope_baseline']}):")
    for row in curve["rows"]:
        out.say(f"  {row['size']:>8}  {row['candidate']:.3g}  torch {row['baseline']:.3g}")


def _job(repo: Path, request: ReproRequest) -> tuple[Any, str | None]:
    """The job the report's reproducer names, with the policy's options for its check (the base's
    policy and spec with ``base``, as on the pull request), and the revision its truth comes from
    (the base branch's tip, as ``check`` reads it; None without ``base``)."""
    from .. import git, pythonpath
    from ..errors import GitError
    from ..plan import job_seed
    from ..protocol.jobs import BASE_SPEC, TRUTH, Job, SpecRef

    rules, loaded = None, None
    if request.base:
        # As on the pull request: the base's policy and, where the spec exists there, its spec and
        # the tree its truth comes from (the base branch's tip, as ``check`` reads them).
        choice = policy_in_force(repo, request.policy, request.base, "HEAD")
        loaded, rules = choice.loaded, choice.rules
    loaded = loaded or load_policy(repo, request.policy)
    try:
        ref = SpecRef.parse(request.spec)
    except ValueError as exc:
        raise GateError(str(exc), hint="copy the spec id from the report, e.g. gate/rms_gate.py::rmsnorm") from None
    if not (repo / ref.file).is_file():
        raise GateError(f"{ref.file}: no such spec file in {repo}")
    chk = loaded.policy.check(request.check)
    growth = request.growth
    if growth and (request.case or request.check != "equivalence" or ":" not in growth):
        raise GateError(f"--growth {growth!r}: give DIM:DTYPE, e.g. --growth n:bfloat16, with the equivalence "
                        f"check and without --case", hint="copy the command from the error-growth finding")
    options = {**chk.options(), "shrink": False, "growth": bool(growth)}
    if growth:
        options["growth_only"] = growth
    seed = request.seed if request.seed is not None else job_seed(None, loaded.policy)
    if request.seed is not None:
        options["seed"] = request.seed
    if rules is not None:
        base_source = None
        try:
            base_source = git.show(repo, rules, ref.file).decode("utf-8", errors="replace")
        except GitError:
            out.say(f"note: {ref.file} does not exist at the base ({rules[:12]}): the work tree's spec judges")
        head_source = (repo / ref.file).read_text(encoding="utf-8", errors="replace")
        if base_source is not None and base_source != head_source:
            from ..rules.plumbing import between_sources

            options[BASE_SPEC] = {"file": ref.file, "name": ref.name, "source": base_source,
                                  "reference_changed": False, "rule_changes": loaded.policy.rule_changes,
                                  "commit": rules,
                                  "plumbing": between_sources(ref.file, ref.name, base_source, head_source)}
        if base_source is not None:
            options[TRUTH] = rules
    # where the spec imports the repository's packages from, as ``check`` plans it (the policy's
    # python_path, else the pyproject's package directories)
    pyproject = repo / "pyproject.toml"
    path = pythonpath.python_path(pyproject.read_bytes() if pyproject.is_file() else None, loaded.policy.python_path)
    job = Job(id=f"{request.check}:{ref.id}", check=request.check, level="required", kernels=(), spec=ref,
              options=options, seed=seed, case=request.case, python_path=path)
    return job, rules
