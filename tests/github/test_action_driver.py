"""The action's driver (python -m gpu_gate.github.action): commands, token handling, step outputs."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Status
from gpu_gate.github import action
from gpu_gate.record import RunRecord


class FakeCli:
    """Records each gpu-gate command and the token it could see; writes what the real one would."""

    def __init__(self, out: Path, codes: dict[str, int]) -> None:
        self.out = out
        self.codes = codes
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(self, argv: list[str]) -> int:
        self.calls.append((argv, os.environ.get("GITHUB_TOKEN") or os.environ.get("GG_TOKEN")))
        self.out.mkdir(parents=True, exist_ok=True)
        if argv[0] == "plan":
            Path(argv[argv.index("--output") + 1]).write_text(json.dumps(
                {"jobs": [{"id": "a"}, {"id": "b"}, {"id": "c"}],
                 "matrix": {"include": [{"shard": "1/2"}, {"shard": "2/2"}]}}))
        else:
            rec = RunRecord(results=[JobResult("a", "compile", Status.FAILED), JobResult("b", "memcheck", Status.PASSED)],
                            planned_jobs=["a", "b", "c"])
            rec.write(self.out / "results.json")
            (self.out / "junit.xml").write_text("<testsuites/>")
        return self.codes.get(argv[0], 0)


def env_for(tmp_path: Path, **inputs: str) -> dict[str, str]:
    env = {"GITHUB_WORKSPACE": str(tmp_path), "GITHUB_OUTPUT": str(tmp_path / "out.txt"), "GG_TOKEN": "s3cret"}
    env.update({f"GG_{k.upper()}": v for k, v in inputs.items()})
    return env


def outputs(tmp_path: Path) -> dict[str, str]:
    lines = (tmp_path / "out.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


@pytest.fixture(autouse=True)
def no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in action.TOKEN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GG_TOKEN", "s3cret")  # as action.yml passes it


def test_check_runs_without_the_token_and_the_publish_phase_publishes_with_it(tmp_path: Path) -> None:
    cli = FakeCli(tmp_path / "gpu-gate-report", {"check": 1, "report": 1})
    assert action.main(env_for(tmp_path, mode="check", base="main", extra_args="--cpu --jobs 2"), run=cli) == 0
    ((check, check_token),) = cli.calls
    assert check[:2] == ["check", "--repo"] and ["--base", "main"] == check[3:5] and check[-2:] == ["--jobs", "2"]
    assert check_token is None, "kernel code runs under check: it must not see the token"
    out = outputs(tmp_path)
    assert out["verdict"] == "failed" and out["exit-code"] == "1"
    assert json.loads(out["counts"]) == {"jobs": 2, "passed": 1, "failed": 1, "error": 0, "not_run": 0,
                                         "missing": 1, "findings": 0, "not_run_here": 0}
    assert out["junit"].endswith("gpu-gate-report/junit.xml") and "sarif" not in out
    assert os.environ.get("GG_TOKEN") == "s3cret", "the environment is restored afterwards"

    (tmp_path / "out.txt").unlink()
    action.main(env_for(tmp_path, mode="check", phase="publish"), run=cli)
    report, report_token = cli.calls[1]
    assert report[:2] == ["report", str(tmp_path / "gpu-gate-report" / "results.json")]
    assert "--github" in report and report_token == "s3cret"
    assert outputs(tmp_path) == {"publish-exit-code": "1"}, "the verdict stays the check step's"


def test_gpu_false_runs_on_the_cpu(tmp_path: Path) -> None:
    cli = FakeCli(tmp_path / "gpu-gate-report", {})
    action.main(env_for(tmp_path, mode="check", gpu="false"), run=cli)
    action.main(env_for(tmp_path, mode="check"), run=cli)
    assert "--cpu" in cli.calls[0][0] and "--cpu" not in cli.calls[1][0]


def test_a_shard_does_not_publish(tmp_path: Path) -> None:
    cli = FakeCli(tmp_path / "gpu-gate-report", {})
    action.main(env_for(tmp_path, mode="check", shard="2/3", artifact="gpu-gate-report"), run=cli)
    assert outputs(tmp_path)["artifact-name"] == "gpu-gate-report-shard-2-of-3"
    action.main(env_for(tmp_path, mode="check", phase="publish", shard="2/3"), run=cli)
    assert [c[0][0] for c in cli.calls] == ["check"]


def test_without_a_token_the_publish_phase_writes_the_summary_only(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GG_TOKEN")
    cli = FakeCli(tmp_path / "gpu-gate-report", {})
    env = env_for(tmp_path, mode="check")
    del env["GG_TOKEN"]
    action.main(env, run=cli)
    action.main({**env, "GG_PHASE": "publish"}, run=cli)
    assert "--no-github" in cli.calls[1][0] and outputs(tmp_path)["publish-exit-code"] == "0"


def test_a_check_that_wrote_no_results_publishes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli = FakeCli(tmp_path / "gpu-gate-report", {"check": 2})
    action.main(env_for(tmp_path, mode="check", phase="publish"), run=cli)
    assert cli.calls == [] and "nothing to publish" in capsys.readouterr().out


def test_plan_mode_outputs_the_matrix(tmp_path: Path) -> None:
    cli = FakeCli(tmp_path / "gpu-gate-report", {})
    action.main(env_for(tmp_path, mode="plan", shards="2"), run=cli)
    argv = cli.calls[0][0]
    assert argv[0] == "plan" and argv[argv.index("--shards") + 1] == "2"
    out = outputs(tmp_path)
    assert json.loads(out["matrix"]) == {"include": [{"shard": "1/2"}, {"shard": "2/2"}]} and out["jobs"] == "3"


def test_report_mode_globs_the_shard_results(tmp_path: Path) -> None:
    for i in (1, 2):
        shard = tmp_path / "gpu-gate-results" / f"gpu-gate-results-{i}-2"
        shard.mkdir(parents=True)
        RunRecord().write(shard / "results.json")
    cli = FakeCli(tmp_path / "gpu-gate-report", {})
    action.main(env_for(tmp_path, mode="report", results="gpu-gate-results/**/results.json", plan="plan.json"),
                run=cli)
    argv, token = cli.calls[0]
    files = [a for a in argv if a.endswith("results.json")]
    assert len(files) == 2 and argv[argv.index("--expect-plan") + 1] == "plan.json" and token == "s3cret"


def test_report_mode_without_results_or_plan_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli = FakeCli(tmp_path / "gpu-gate-report", {})
    action.main(env_for(tmp_path, mode="report", results="nothing/*.json"), run=cli)
    assert cli.calls == [] and outputs(tmp_path)["exit-code"] == "2"
    assert "::error title=gpu-gate::no results.json matched 'nothing/*.json'" in capsys.readouterr().out


def test_unknown_mode_is_a_usage_error(tmp_path: Path) -> None:
    action.main(env_for(tmp_path, mode="deploy"), run=FakeCli(tmp_path, {}))
    assert outputs(tmp_path)["exit-code"] == "2"


def test_plan_never_runs_in_the_publish_phase(tmp_path: Path) -> None:
    cli = FakeCli(tmp_path, {})
    action.main(env_for(tmp_path, mode="plan", phase="publish"), run=cli)
    assert cli.calls == [] and outputs(tmp_path)["exit-code"] == "2"


def test_report_mode_passes_the_comment_mode_and_the_pr_and_sha_overrides(tmp_path: Path) -> None:
    shard = tmp_path / "gpu-gate-results" / "r"
    shard.mkdir(parents=True)
    RunRecord().write(shard / "results.json")
    cli = FakeCli(tmp_path / "gpu-gate-report", {})
    action.main(env_for(tmp_path, mode="report", results="gpu-gate-results/**/results.json",
                        comment_mode="failures-only", pr="7", sha="4" * 40), run=cli)
    argv, _ = cli.calls[0]
    assert argv[argv.index("--comment-mode") + 1] == "failures-only"
    assert argv[argv.index("--pr") + 1] == "7" and argv[argv.index("--sha") + 1] == "4" * 40
    cli = FakeCli(tmp_path / "gpu-gate-report", {})
    action.main(env_for(tmp_path, mode="report", results="gpu-gate-results/**/results.json"), run=cli)
    assert "--pr" not in cli.calls[0][0] and "--sha" not in cli.calls[0][0]


def _artifact(tmp_path: Path, mode: str = "check") -> Path | None:
    env = {**env_for(tmp_path, mode=mode, artifact="gpu-gate-report"), "RUNNER_TEMP": str(tmp_path / "runner-temp")}
    (tmp_path / "runner-temp").mkdir(exist_ok=True)
    action.main(env, run=FakeCli(tmp_path / "gpu-gate-report", {}))
    staged = outputs(tmp_path)["artifact-dir"]
    return Path(staged) if staged else None


def test_the_artifact_is_a_copy_of_the_reports_the_run_wrote_outside_the_workspace(tmp_path: Path) -> None:
    staged = _artifact(tmp_path)
    assert staged is not None and staged.parent == tmp_path / "runner-temp"
    assert sorted(p.name for p in staged.iterdir()) == ["junit.xml", "results.json"]
    assert (staged / "junit.xml").read_text() == "<testsuites/>"


def test_the_artifact_leaves_out_what_the_pull_request_put_beside_the_reports(tmp_path: Path) -> None:
    """A committed file, a link to a file of the runner's, a hard link to one and a stale report in
    the report directory: none of it is uploaded, only what the run wrote."""
    secret = tmp_path / "runner-secret"
    secret.write_text("ghp_runner_credentials")
    out = tmp_path / "gpu-gate-report"
    out.mkdir()
    (out / "stolen.txt").write_text("anything")
    (out / "report.md").symlink_to(secret)
    os.link(secret, out / "report.sarif")
    (out / "plan.json").write_text("{}")  # written before the run: not the gate's
    time.sleep(1.2)  # past the file system clock's slack
    staged = _artifact(tmp_path)
    assert staged is not None
    assert sorted(p.name for p in staged.iterdir()) == ["junit.xml", "results.json"]
    assert not any("ghp_runner_credentials" in p.read_text() for p in staged.iterdir())


def test_a_report_directory_that_is_a_link_uploads_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "runner-home"
    elsewhere.mkdir()
    (elsewhere / "results.json").write_text("the runner's own file")
    (tmp_path / "gpu-gate-report").symlink_to(elsewhere)
    assert _artifact(tmp_path) is None
    assert "gpu-gate-report is a symbolic link" in capsys.readouterr().out


def test_no_artifact_name_stages_nothing(tmp_path: Path) -> None:
    action.main(env_for(tmp_path, mode="check"), run=FakeCli(tmp_path / "gpu-gate-report", {}))
    assert outputs(tmp_path)["artifact-dir"] == ""


def test_the_workflows_collect_step_stages_what_the_step_wrote(tmp_path: Path) -> None:
    """``python -m gpu_gate.github.artifact``, as the reusable workflow's jobs run it before each upload."""
    import subprocess
    import sys

    out = tmp_path / "gpu-gate-shard"
    out.mkdir()
    (out / "results.json").symlink_to(tmp_path / "out.txt")
    time.sleep(1.2)
    since = time.time_ns()
    (out / "junit.xml").write_text("<testsuites/>")
    env = {**os.environ, "GITHUB_OUTPUT": str(tmp_path / "out.txt"), "RUNNER_TEMP": str(tmp_path)}
    p = subprocess.run([sys.executable, "-P", "-m", "gpu_gate.github.artifact", "gpu-gate-shard", "--since-ns", str(since)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    staged = Path(outputs(tmp_path)["dir"])
    assert staged.parent == tmp_path and [f.name for f in staged.iterdir()] == ["junit.xml"]
    assert "results.json is not uploaded" in p.stdout
