"""The command-line conventions kernel developers expect, on real repositories and real processes:
--version, -q/-v, colour on a terminal only, --format json, --spec/--all, the demo's kept reports,
and the pre-commit hooks run by a real `git commit`."""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from conftest_git import GitRepo

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")

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
  equivalence: {cases: 4, growth: false, shrink: false}
"""

SPEC = """\
import torch
import gpu_gate as gg

@gg.spec(dims={{"n": gg.Dim(1, 300)}}, inputs={{"x": gg.Tensor(("n",))}}, reference=lambda x: x * {k},
         covers=["csrc/{name}.cu"])
def {name}_gate(x):
    return x * {got}
"""

KERNEL = '__global__ void {name}_it(float* x, int n) {{ int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }}\n'


def gate(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_EVENT_PATH", "NO_COLOR")}
    return subprocess.run([sys.executable, "-m", "gpu_gate", *args], cwd=cwd, capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=600)


def spec(name: str, k: int = 2, got: int = 2) -> str:
    return SPEC.format(name=name, k=k, got=got)


def two_kernels(make_repo, bad: bool = False) -> GitRepo:  # type: ignore[no-untyped-def]
    """main has a third spec that the change does not touch; feature changes double and triple."""
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "csrc/quad.cu": KERNEL.format(name="quad"),
                           "gate/quad_gate.py": spec("quad", 4, 4)})
    r.branch("feature")
    r.commit("kernels", {"csrc/double.cu": KERNEL.format(name="double"), "gate/double_gate.py": spec("double"),
                         "csrc/triple.cu": KERNEL.format(name="triple"),
                         "gate/triple_gate.py": spec("triple", 3, 4 if bad else 3)})
    return r


# --- --version, and the options every subcommand takes ------------------------------------------

def test_version_names_the_command_and_the_installed_distribution(tmp_path: Path) -> None:
    p = gate("--version", cwd=tmp_path)
    assert p.returncode == 0
    assert p.stdout.strip() == f"gpu-gate {metadata.version('gpu-kernel-gate')} (distribution gpu-kernel-gate)"
    entry = Path(sys.executable).parent / "gpu-gate"
    assert subprocess.run([str(entry), "--version"], capture_output=True, text=True).stdout == p.stdout


@pytest.mark.parametrize("cmd", ["check", "plan", "report", "validate-policy", "list-kernels", "repro", "demo", "audit",
                                 "doctor", "init", "vendor"])
def test_every_subcommand_takes_quiet_verbose_and_color(cmd: str, tmp_path: Path) -> None:
    p = gate(cmd, "--help", cwd=tmp_path)
    assert p.returncode == 0
    assert "-q, --quiet" in p.stdout and "-v, --verbose" in p.stdout and "--color {auto,always,never}" in p.stdout
    both = gate(cmd, "-q", "-v", cwd=tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


# --- -q and -v -----------------------------------------------------------------------------------

def test_quiet_check_prints_the_verdict_line_only(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo, bad=True)
    p = gate("check", "--base", "main", "-q", "--no-cache", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    (line,) = p.stdout.splitlines()  # the verdict line alone, with the cases it ran
    assert line.startswith("gpu-gate: FAILED - 2 jobs, 1 passed, 1 failed; 1 blocking; ") and "cases run" in line, line
    assert p.stderr == ""
    normal = gate("check", "--base", "main", "--no-cache", cwd=r.path)
    assert "[2/2]" in normal.stdout and "Blocking:" in normal.stdout and "reports: " in normal.stdout
    # errors still show with -q
    err = gate("check", "--base", "no-such-ref", "-q", cwd=r.path)
    assert err.returncode == 2 and err.stdout == "" and err.stderr.startswith("gpu-gate: error: unknown git ref")


def test_verbose_check_shows_each_jobs_findings_and_seed(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo, bad=True)
    normal = gate("check", "--base", "main", "--no-cache", cwd=r.path)
    loud = gate("check", "--base", "main", "--no-cache", "-v", cwd=r.path)
    assert loud.returncode == normal.returncode == 1
    assert "      seed: " in loud.stdout and "      seed: " not in normal.stdout
    assert "      kernels: csrc/triple.cu" in loud.stdout
    assert "      error mismatch:" in loud.stdout or "      error " in loud.stdout, loud.stdout
    assert len(loud.stdout.splitlines()) > len(normal.stdout.splitlines())


def test_quiet_and_verbose_list_kernels(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo)
    q = gate("list-kernels", "--base", "main", "-q", cwd=r.path)
    assert q.returncode == 0
    assert q.stdout == "2 changed kernel file(s), 0 not covered by any gate spec; 2 spec(s) run\n"
    v = gate("list-kernels", "--base", "main", "-v", cwd=r.path)
    assert "note: head: the work tree, uncommitted and untracked files included" in v.stdout
    assert v.stdout.endswith(q.stdout)


# --- colour --------------------------------------------------------------------------------------

def on_a_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run gpu-gate with stdout on a pseudo-terminal, as a developer's shell runs it."""
    leader, follower = pty.openpty()
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "NO_COLOR", "TERM")}
    proc = subprocess.Popen([sys.executable, "-m", "gpu_gate", *args], cwd=cwd, stdout=follower,
                            stderr=subprocess.PIPE, env={**base, "TERM": "xterm", **env})
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode()


def uncovered_repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY})
    r.branch("feature")
    r.commit("kernel", {"csrc/lonely.cu": KERNEL.format(name="lonely")})
    return r


def test_colour_on_a_terminal_only(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = uncovered_repo(make_repo)
    args = ["list-kernels", "--base", "main"]
    tty = on_a_terminal(args, r.path, {})
    assert "\x1b[31mNOT COVERED\x1b[0m" in tty
    assert not ANSI.search(on_a_terminal(args, r.path, {"NO_COLOR": "1"}))
    assert not ANSI.search(on_a_terminal(args, r.path, {"GITHUB_ACTIONS": "true"}))
    assert not ANSI.search(on_a_terminal(args + ["--color", "never"], r.path, {}))
    assert not ANSI.search(on_a_terminal(args, r.path, {"TERM": "dumb"}))
    piped = gate(*args, cwd=r.path)
    assert "NOT COVERED" in piped.stdout and not ANSI.search(piped.stdout)
    forced = gate(*args, "--color", "always", cwd=r.path, env={"NO_COLOR": "1"})  # the flag wins
    assert "\x1b[31mNOT COVERED\x1b[0m" in forced.stdout


def test_check_colours_statuses_and_the_verdict(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo, bad=True)
    p = gate("check", "--base", "main", "--no-cache", "--color", "always", cwd=r.path)
    assert "\x1b[31mFAIL   \x1b[0m equivalence gate/triple_gate.py::triple_gate" in p.stdout
    assert "\x1b[32mPASS   \x1b[0m equivalence gate/double_gate.py::double_gate" in p.stdout
    assert "gpu-gate: \x1b[1;31mFAILED\x1b[0m - 2 jobs" in p.stdout
    # The written reports never carry terminal colour.
    out = r.path / ".gpu-gate" / "out"
    assert not any(ANSI.search(f.read_text()) for f in out.iterdir() if f.is_file())


def test_use_colour_rules() -> None:
    from gpu_gate.commands.output import use_colour

    class Tty:
        def isatty(self) -> bool:
            return True

    tty = Tty()
    assert use_colour("auto", tty, {}) is True  # type: ignore[arg-type]
    assert use_colour("auto", tty, {"NO_COLOR": ""}) is True  # type: ignore[arg-type]  # "" is unset (no-color.org)
    assert use_colour("auto", tty, {"NO_COLOR": "0"}) is False  # type: ignore[arg-type]
    assert use_colour("auto", tty, {"GITHUB_ACTIONS": "true"}) is False  # type: ignore[arg-type]
    assert use_colour("never", tty, {}) is False  # type: ignore[arg-type]
    assert use_colour("always", sys.stdout, {"GITHUB_ACTIONS": "true"}) is True


# --- --format json -------------------------------------------------------------------------------

def test_check_json_is_one_object_on_stdout_and_progress_on_stderr(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo, bad=True)
    p = gate("check", "--base", "main", "--no-cache", "--format", "json", cwd=r.path)
    assert p.returncode == 1
    doc = json.loads(p.stdout)  # the whole of stdout
    assert doc["schema"] == 1 and doc["command"] == "check"
    assert doc["passed"] is False and doc["exit_code"] == 1
    assert doc["headline"].startswith("gpu-gate: FAILED - 2 jobs, 1 passed, 1 failed; 1 blocking; ") and doc["headline"].endswith(" equivalence cases run"), doc["headline"]
    assert doc["counts"]["failed"] == 1
    status = {j["id"]: j["status"] for j in doc["jobs"]}
    assert status == {"equivalence:gate/double_gate.py::double_gate": "passed",
                      "equivalence:gate/triple_gate.py::triple_gate": "failed"}
    assert [b["job"] for b in doc["blocking"]] == ["equivalence:gate/triple_gate.py::triple_gate"]
    assert doc["blocking"][0]["finding"]["spec"] == "gate/triple_gate.py::triple_gate"
    assert (r.path / doc["reports"]["json"]).is_file()
    assert "[2/2]" in p.stderr and doc["headline"] in p.stderr


def test_list_kernels_json_without_torch(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = uncovered_repo(make_repo)
    r.commit("and a covered one", {"csrc/double.cu": KERNEL.format(name="double"), "gate/double_gate.py": spec("double")})
    code = ("import sys; sys.modules['torch'] = None; from gpu_gate.cli import main; "
            "sys.exit(main(['list-kernels', '--base', 'main', '--format', 'json']))")
    p = subprocess.run([sys.executable, "-c", code], cwd=r.path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == 1 and doc["command"] == "list-kernels"
    kernels = {k["path"]: k for k in doc["kernels"]}
    assert kernels["csrc/lonely.cu"]["covered"] is False and kernels["csrc/lonely.cu"]["specs"] == []
    assert kernels["csrc/double.cu"]["covered"] is True
    assert list(doc["selected"]) == ["gate/double_gate.py::double_gate"]
    uncovered = [f["file"] for f in doc["findings"] if f["kind"] == "uncovered"]
    assert uncovered == ["csrc/lonely.cu"]
    assert "NOT COVERED" in p.stderr


def test_plan_is_json_at_every_level(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo)
    plain = gate("plan", "--base", "main", cwd=r.path)
    for extra in (["--format", "json"], ["-q"], ["-v"]):
        p = gate("plan", "--base", "main", *extra, cwd=r.path)
        assert p.returncode == 0 and p.stdout == plain.stdout, extra
    loud = gate("plan", "--base", "main", "-v", cwd=r.path)
    assert ("spec gate/double_gate.py::double_gate: the spec file is added; covers csrc/double.cu (cuda, added)"
            in loud.stderr)


# --- --spec and --all ----------------------------------------------------------------------------

def job_ids(p: subprocess.CompletedProcess[str]) -> list[str]:
    assert p.returncode == 0, p.stderr
    return [j["id"] for j in json.loads(p.stdout)["jobs"]]


def test_spec_pattern_keeps_the_matching_specs(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo)
    assert job_ids(gate("plan", "--base", "main", cwd=r.path)) == [
        "equivalence:gate/double_gate.py::double_gate", "equivalence:gate/triple_gate.py::triple_gate"]
    for pattern in ("gate/triple_gate.py::triple_gate", "gate/triple_gate.py", "triple_gate", "*trip*"):
        assert job_ids(gate("plan", "--base", "main", "--spec", pattern, cwd=r.path)) == [
            "equivalence:gate/triple_gate.py::triple_gate"], pattern
    both = gate("plan", "--base", "main", "--spec", "double*", "--spec", "triple*", cwd=r.path)
    assert len(job_ids(both)) == 2
    plan = json.loads(gate("plan", "--base", "main", "--spec", "triple*", cwd=r.path).stdout)
    assert "--spec 'triple*': 1 of the 2 specs this change selects run; the other 1 are not checked in this run" \
        in plan["notes"]
    p = gate("check", "--base", "main", "--spec", "double*", "--no-cache", cwd=r.path)
    assert p.returncode == 0, p.stdout
    ran = json.loads((r.path / ".gpu-gate/out/results.json").read_text())
    assert [x["job_id"] for x in ran["results"]] == ["equivalence:gate/double_gate.py::double_gate"]
    assert any(n.startswith("--spec 'double*': 1 of the 2 specs") for n in ran["notes"])


def test_spec_pattern_matching_nothing_is_a_clear_error(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo)
    for cmd in ("plan", "list-kernels", "check"):
        p = gate(cmd, "--base", "main", "--spec", "rmsnorm*", cwd=r.path)
        assert p.returncode == 2, cmd
        assert p.stderr.strip() == ("gpu-gate: error: --spec 'rmsnorm*' matches no spec in the repository (a pattern "
                                    "is a glob on spec ids PATH::NAME, files or names; e.g. --spec "
                                    "'gate/double_gate.py::double_gate')"), cmd
    quad = gate("plan", "--base", "main", "--spec", "quad*", cwd=r.path)
    assert quad.returncode == 2
    assert quad.stderr.strip() == ("gpu-gate: error: --spec 'quad*' matches gate/quad_gate.py::quad_gate, which this "
                                   "change does not select (add --all to run every spec in the repository)")
    assert job_ids(gate("plan", "--base", "main", "--all", "--spec", "quad*", cwd=r.path)) == [
        "equivalence:gate/quad_gate.py::quad_gate"]
    with_plan = gate("check", "--plan", "p.json", "--spec", "x", cwd=r.path)
    assert with_plan.returncode == 2 and "a plan file is already chosen" in with_plan.stderr


def test_all_runs_every_spec_with_its_reason(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = two_kernels(make_repo)
    plan = json.loads(gate("plan", "--base", "main", "--all", cwd=r.path).stdout)
    assert sorted(plan["selected"]) == ["gate/double_gate.py::double_gate", "gate/quad_gate.py::quad_gate",
                                        "gate/triple_gate.py::triple_gate"]
    assert plan["selected"]["gate/quad_gate.py::quad_gate"] == ["--all: every spec in the repository runs"]
    assert plan["selected"]["gate/double_gate.py::double_gate"][0].startswith("the spec file is added")
    # Nightly: no base, no change; every spec still runs.
    nightly = gate("check", "--all", "--no-cache", cwd=r.path)
    assert nightly.returncode == 0, nightly.stdout + nightly.stderr
    assert "gpu-gate: PASSED - 3 jobs, 3 passed, 0 failed" in nightly.stdout
    assert gate("check", "--no-cache", cwd=r.path).returncode == 2  # without --all a base is still needed
    # Every job knows its spec's kernel files, changed or not: the compute-sanitizer checks filter
    # on the kernels' names, and a job with none could not run (on a GPU: "nothing to filter on").
    kernels = {j["id"]: j["kernels"] for j in plan["jobs"]}
    assert kernels["equivalence:gate/quad_gate.py::quad_gate"] == ["csrc/quad.cu"], kernels


# --- demo ----------------------------------------------------------------------------------------

def test_demo_keeps_its_reports_where_it_says(tmp_path: Path) -> None:
    p = gate("demo", "--out", "my-demo", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    reports = tmp_path / "my-demo" / "reports"
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("reports in "))
    named = [Path(x) for x in line.split(": ", 1)[1].split(", ")]
    assert {x.name for x in named} == {"junit.xml", "report.md", "report.sarif", "results.json"}
    assert all((tmp_path / x).is_file() and (tmp_path / x).parent == reports for x in named)
    assert (tmp_path / "my-demo" / "repo" / ".git").is_dir()
    again = gate("demo", "--out", "my-demo", cwd=tmp_path)
    assert again.returncode == 2 and "my-demo: already exists" in again.stderr
    assert all((tmp_path / x).is_file() for x in named)  # the refused second run deleted nothing
    q = gate("demo", "-q", cwd=tmp_path)  # the default directory
    assert q.returncode == 0
    assert q.stdout.splitlines()[0].startswith("gpu-gate: FAILED")
    assert "  RED    kernels/rmsnorm.py" in q.stdout and (tmp_path / "gpu-gate-demo" / "reports" / "report.md").is_file()


# --- the pre-commit hooks, run by a real `git commit` --------------------------------------------

def install_hooks(r: GitRepo) -> dict[str, dict[str, object]]:
    """A .git/hooks/pre-commit that runs each hook's entry as .pre-commit-hooks.yaml declares it
    (no filenames passed), as pre-commit does, stopping at the first that fails."""
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"gpu-gate-validate", "gpu-gate-list-kernels"}
    assert all(h["pass_filenames"] is False and h["language"] == "python" for h in hooks.values())
    script = "#!/bin/sh\nset -e\n" + "".join(f"echo '== {i}'\n{h['entry']}\n" for i, h in hooks.items())
    path = r.path / ".git" / "hooks" / "pre-commit"
    path.write_text(script)
    path.chmod(0o755)
    return hooks


def commit(r: GitRepo, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("GITHUB_EVENT_PATH", None)
    return subprocess.run(["git", "commit", "-m", "change", *args], cwd=r.path, capture_output=True, text=True,
                          env=env, timeout=300)


def test_pre_commit_hooks_read_the_staged_change(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "gate/double_gate.py": spec("double")})
    install_hooks(r)
    r.write("csrc/double.cu", KERNEL.format(name="double"))
    r.write("csrc/lonely.cu", KERNEL.format(name="lonely"))  # in the work tree, never staged
    r.git("add", "csrc/double.cu")
    p = commit(r)
    p.stdout += p.stderr  # git runs hooks with their stdout on its stderr
    assert p.returncode == 0, p.stdout + p.stderr
    assert ".gpu-gate.yml: valid; checks: equivalence (required)" in p.stdout
    assert "csrc/double.cu  [cuda, added]" in p.stdout and "covered by gate/double_gate.py::double_gate" in p.stdout
    assert "lonely" not in p.stdout
    assert r.git("log", "-1", "--format=%s") == "change"


def test_pre_commit_hook_lists_an_uncovered_kernel_and_still_commits(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY})
    install_hooks(r)
    r.write("csrc/lonely.cu", KERNEL.format(name="lonely"))
    r.git("add", "-A")
    p = commit(r)
    p.stdout += p.stderr  # git runs hooks with their stdout on its stderr
    assert p.returncode == 0, p.stdout + p.stderr
    assert "csrc/lonely.cu  [cuda, added]" in p.stdout and "NOT COVERED" in p.stdout


def test_pre_commit_hook_blocks_a_broken_staged_policy(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY})
    install_hooks(r)
    head = r.git("rev-parse", "HEAD")
    r.write(".gpu-gate.yml", POLICY.replace("memcheck: off", "memchek: off"))
    r.git("add", ".gpu-gate.yml")
    p = commit(r)
    p.stdout += p.stderr  # git runs hooks with their stdout on its stderr
    assert p.returncode != 0
    assert ".gpu-gate.yml:8:3: unknown check 'memchek'" in p.stderr and "did you mean 'memcheck'" in p.stderr, p.stderr
    assert r.git("rev-parse", "HEAD") == head  # nothing was committed
    # Stage a good policy, leave the typo in the work tree only: the hook judges what is committed.
    r.write(".gpu-gate.yml", POLICY.replace("cases: 4", "cases: 8"))
    r.git("add", ".gpu-gate.yml")
    r.write(".gpu-gate.yml", POLICY.replace("memcheck: off", "memchek: off"))
    p = commit(r)
    p.stdout += p.stderr  # git runs hooks with their stdout on its stderr
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cases: 8" in r.git("show", "HEAD:.gpu-gate.yml")


def test_staged_listing_before_the_first_commit(git_env: None, tmp_path: Path) -> None:
    r = GitRepo(tmp_path / "fresh")
    r.path.mkdir()
    r.git("init", "-q", "-b", "main")
    install_hooks(r)
    r.write(".gpu-gate.yml", POLICY)
    r.write("csrc/double.cu", KERNEL.format(name="double"))
    r.write("gate/double_gate.py", spec("double"))
    r.git("add", "-A")
    p = commit(r)
    p.stdout += p.stderr  # git runs hooks with their stdout on its stderr
    assert p.returncode == 0, p.stdout + p.stderr
    assert "csrc/double.cu  [cuda, added]" in p.stdout
    assert gate("list-kernels", "--staged", "--base", "main", cwd=r.path).returncode == 2
