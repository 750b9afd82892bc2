"""The composite action's driver: ``python -m gpu_gate.github.action``.

``action.yml`` hands its inputs over as ``GG_*`` environment variables (never as
``${{ }}`` inside a script). This module turns them into ``gpu-gate`` commands, runs
them in-process, and writes the step outputs. It exits 0 whatever the verdict, so that
the report artifact is uploaded; the action's last step then fails on ``exit-code``.

Each mode runs in one of two phases, each a step of its own in ``action.yml``:

- ``run`` (``check``, ``plan``): the repository's code runs here, so the step holds no token. If
  a token reached the step's environment anyway (a workflow's ``env:``), the driver starts itself
  again without it before anything else runs (see :mod:`gpu_gate.github.sealed`).
- ``publish`` (``report``, and publishing a ``check``'s own ``results.json``): holds the token and
  runs no repository code: it reads result files and talks to GitHub.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from pathlib import Path

from ..exitcodes import ExitCode
from . import artifact, credentials, sealed
from ..record import RunRecord
from ..verdict import Rules, decide

TOKEN_VARIABLES = ("GITHUB_TOKEN", "GH_TOKEN", "INPUT_TOKEN", "GG_TOKEN")
MODES = ("check", "plan", "report")
PHASES = ("run", "publish")
DEFAULT_PHASE = {"check": "run", "plan": "run", "report": "publish"}


@dataclasses.dataclass(frozen=True)
class Inputs:
    mode: str
    phase: str
    workspace: Path
    out: Path
    policy: str = ""
    base: str = ""
    head: str = ""
    shard: str = ""
    shards: str = ""
    results: str = ""
    plan: str = ""
    comment_mode: str = "sticky"
    pr: str = ""
    sha: str = ""
    extra_args: tuple[str, ...] = ()
    artifact: str = ""
    gpu: bool = True
    worker_python: str = ""  # the venv that the sandboxed setup installed into (the setup step's output)
    token: str = dataclasses.field(default="", repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Inputs:
        def get(name: str) -> str:
            return env.get(f"GG_{name}", "").strip()

        workspace = Path(env.get("GITHUB_WORKSPACE") or ".")
        out = Path(get("OUT") or "gpu-gate-report")
        mode = get("MODE") or "check"
        return cls(mode=mode, phase=get("PHASE") or DEFAULT_PHASE.get(mode, "run"), workspace=workspace,
                   out=out if out.is_absolute() else workspace / out,
                   policy=get("POLICY"), base=get("BASE"), head=get("HEAD"), shard=get("SHARD"),
                   shards=get("SHARDS"), results=get("RESULTS"), plan=get("PLAN"),
                   comment_mode=get("COMMENT_MODE") or "sticky", pr=get("PR"), sha=get("SHA"),
                   extra_args=tuple(shlex.split(get("EXTRA_ARGS"))), artifact=get("ARTIFACT"),
                   gpu=get("GPU").lower() not in ("false", "0", "no"), worker_python=get("WORKER_PYTHON"),
                   token=env.get("GG_TOKEN", ""))


def _opt(flag: str, value: str) -> list[str]:
    return [flag, value] if value else []


def _selection(inp: Inputs) -> list[str]:
    return ["--repo", str(inp.workspace), *_opt("--base", inp.base), *_opt("--head", inp.head),
            *_opt("--policy", inp.policy)]


def _publish_flags(inp: Inputs) -> list[str]:
    return ["--comment-mode", inp.comment_mode, *_opt("--pr", inp.pr), *_opt("--sha", inp.sha),
            "--github" if inp.token else "--no-github"]


@contextmanager
def _group(title: str) -> Iterator[None]:
    print(f"::group::{title}", flush=True)
    try:
        yield
    finally:
        print("::endgroup::", flush=True)


@contextmanager
def _token_env(environ: MutableMapping[str, str], token: str | None) -> Iterator[None]:
    """The token in the environment (for ``report``) or no token at all (for ``check``)."""
    saved = {k: environ.pop(k) for k in TOKEN_VARIABLES if k in environ}
    if token:
        environ["GITHUB_TOKEN"] = token
    try:
        yield
    finally:
        environ.pop("GITHUB_TOKEN", None)
        environ.update(saved)


Runner = Callable[[list[str]], int]


def _cli(argv: list[str]) -> int:
    from ..cli import main

    return int(main(argv))


def run_check(inp: Inputs, outputs: dict[str, str], run: Runner) -> int:
    """The checks, with no token anywhere in reach; publishing is the next step's (``publish_check``)."""
    for warning in credentials.warnings(inp.workspace):
        print(f"::warning title=gpu-gate::{warning}", flush=True)
    argv = ["check", *_selection(inp), "--out", str(inp.out), *_opt("--shard", inp.shard),
            *_opt("--plan", inp.plan), *([] if inp.gpu else ["--cpu"]), *_opt("--worker-python", inp.worker_python),
            *inp.extra_args]
    with _group("gpu-gate check"), _token_env(os.environ, None):
        return run(argv)


def publish_check(inp: Inputs, outputs: dict[str, str], run: Runner) -> int:
    """Publish a lone check's results.json; a shard leaves publishing to the report job."""
    results = inp.out / "results.json"
    if inp.shard:
        return ExitCode.PASSED
    if not results.exists():
        print(f"::warning title=gpu-gate::no {results}: the check wrote no results, nothing to publish", flush=True)
        return ExitCode.PASSED
    with _group("gpu-gate report"), _token_env(os.environ, inp.token):
        return run(["report", str(results), "--out", str(inp.out), *_publish_flags(inp)])


def run_plan(inp: Inputs, outputs: dict[str, str], run: Runner) -> int:
    plan_path = inp.out / "plan.json"
    argv = ["plan", *_selection(inp), "--shards", inp.shards or "1", "--output", str(plan_path), *inp.extra_args]
    with _group("gpu-gate plan"), _token_env(os.environ, None):
        code = run(argv)
    if code == ExitCode.PASSED and plan_path.exists():
        plan = json.loads(plan_path.read_text())
        outputs["plan"] = str(plan_path)
        outputs["matrix"] = json.dumps(plan.get("matrix", {"include": []}), separators=(",", ":"))
        outputs["jobs"] = str(len(plan.get("jobs", [])))
    return code


def run_report(inp: Inputs, outputs: dict[str, str], run: Runner) -> int:
    pattern = inp.results or "**/results.json"
    root = inp.workspace
    files = sorted(glob.glob(pattern if os.path.isabs(pattern) else str(root / pattern), recursive=True))
    files = [f for f in files if Path(f).resolve().parent != inp.out.resolve()]
    if not files and not inp.plan:
        print(f"::error title=gpu-gate::no results.json matched {pattern!r} and no plan was given: "
              "nothing to report (did every shard fail before writing its results?)", flush=True)
        return ExitCode.USAGE_ERROR
    argv = ["report", *files, "--out", str(inp.out), *_opt("--expect-plan", inp.plan),
            *_publish_flags(inp), *_opt("--policy", inp.policy), *inp.extra_args]
    with _group(f"gpu-gate report ({len(files)} result files)"), _token_env(os.environ, inp.token):
        return run(argv)


MODE_RUNNERS: dict[tuple[str, str], Callable[[Inputs, dict[str, str], Runner], int]] = {
    ("check", "run"): run_check, ("check", "publish"): publish_check,
    ("plan", "run"): run_plan, ("report", "publish"): run_report,
}


def report_outputs(inp: Inputs, code: int) -> dict[str, str]:
    outputs = {"exit-code": str(int(code)), "verdict": "passed" if code == ExitCode.PASSED else "failed",
               "report-dir": str(inp.out), "artifact-name": artifact_name(inp)}
    for key, name in (("junit", "junit.xml"), ("markdown", "report.md"), ("sarif", "report.sarif")):
        if (inp.out / name).exists():
            outputs[key] = str(inp.out / name)
    results = inp.out / "results.json"
    if results.exists():
        try:
            outputs["counts"] = json.dumps(decide(RunRecord.read(results), Rules()).counts, separators=(",", ":"))
        except (ValueError, KeyError):
            pass
    return outputs


def artifact_name(inp: Inputs) -> str:
    if not inp.artifact:
        return ""
    suffix = "-shard-" + inp.shard.replace("/", "-of-") if inp.shard else ""
    return re.sub(r"[^A-Za-z0-9._-]", "-", inp.artifact + suffix)


def write_outputs(path: str | None, outputs: Mapping[str, str]) -> None:
    lines = []
    for key, value in outputs.items():
        if "\n" in value:
            lines.append(f"{key}<<GPU_GATE_EOF\n{value}\nGPU_GATE_EOF")
        else:
            lines.append(f"{key}={value}")
    text = "\n".join(lines) + "\n"
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def main(env: Mapping[str, str] | None = None, run: Runner = _cli) -> int:
    environ = os.environ if env is None else env
    inp = Inputs.from_env(environ)
    runner = MODE_RUNNERS.get((inp.mode, inp.phase))
    extra: dict[str, str] = {}
    started_ns = time.time_ns()
    if runner is None:
        print(f"::error title=gpu-gate::mode {inp.mode!r} in phase {inp.phase!r}: use mode check, plan or report",
              flush=True)
        code = int(ExitCode.USAGE_ERROR)
    else:
        code = int(runner(inp, extra, run))
    if (inp.mode, inp.phase) == ("check", "publish"):
        outputs = {"publish-exit-code": str(code)}  # the verdict is the check step's
    else:
        outputs = report_outputs(inp, code)
        outputs["artifact-dir"] = _stage_artifact(inp, started_ns, environ) if outputs["artifact-name"] else ""
    outputs.update(extra)
    write_outputs(environ.get("GITHUB_OUTPUT"), outputs)
    return 0


def _stage_artifact(inp: Inputs, started_ns: int, environ: Mapping[str, str]) -> str:
    """The directory the upload step uploads: the reports this run wrote, copied out of the workspace
    (see :mod:`.artifact`); '' when there are none."""
    temp = environ.get("RUNNER_TEMP")
    dest, skipped = artifact.stage(inp.out, inp.workspace, started_ns, Path(temp) if temp else None)
    for line in skipped:
        print(f"::warning title=gpu-gate::{line}", flush=True)
    return str(dest) if dest else ""


def _seal_run_phase() -> None:
    """In the run phase, start again without any token if the step's environment held one."""
    phase = os.environ.get("GG_PHASE") or DEFAULT_PHASE.get(os.environ.get("GG_MODE") or "check", "run")
    if phase == "run" and sealed.dropped(os.environ):
        # gpu-gate's own driver keeps its step outputs; the checks' workers get none of the command files.
        sealed.exec_sealed([sys.executable, "-P", "-m", "gpu_gate.github.action"], keep=("GITHUB_OUTPUT",))


if __name__ == "__main__":
    _seal_run_phase()
    sys.exit(main())
