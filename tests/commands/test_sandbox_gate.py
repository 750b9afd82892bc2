"""`gpu-gate check` against pull requests that attack the gate itself, end to end on real git repositories.

Each attack runs under ``runner.sandbox: required`` (bubblewrap, installed by CI), where it must
fail, and, where that shows something, under ``off``, where it succeeds: the attack is real.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest_git import GitRepo

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (CI installs it)")

POLICY = """\
version: 1
kernels: {{include: ["csrc/**/*.cu"]}}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {{cases: 2, growth: false, shrink: false}}
runner: {{sandbox: {mode}}}
"""

SPEC = """\
import gpu_gate as gg
{prelude}

@gg.spec(dims={{"n": gg.Dim(1, 64)}}, inputs={{"x": gg.Tensor(("n",))}}, reference=lambda x: x * 2,
         covers=["csrc/k.cu"])
def {name}(x):
    {body}
"""

KERNEL = '__global__ void k(float* x) {}\n'


def gate(*args: str, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def _repo(make_repo, body: str, mode: str = "required", prelude: str = "", name: str = "k_gate",  # type: ignore[no-untyped-def]
          kernel: str = KERNEL) -> GitRepo:
    r = make_repo("proj", {".gpu-gate.yml": POLICY.format(mode=mode), "README.md": "x\n"})
    r.branch("feature")
    r.commit("kernel", {"csrc/k.cu": kernel, f"gate/{name}.py": SPEC.format(name=name, body=body, prelude=prelude)})
    return r


def _results(r: GitRepo) -> dict[str, object]:
    return dict(json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text()))


# --- the gate's environment --------------------------------------------------------------------------------


SNOOP = """import glob
    for p in glob.glob('/proc/[0-9]*/environ'):
        try:
            seen = open(p, 'rb').read()
        except OSError:
            continue
        if b'marker-5e1f' in seen:
            return x * 3  # it found the gate: a kernel that games the test would cheat here
    return x * 2"""


def test_a_spec_that_searches_every_environ_for_the_gates_marker_finds_nothing(make_repo) -> None:  # type: ignore[no-untyped-def]
    marker = {"GG_TOKEN": "marker-5e1f", "GPU_GATE_PROBE": "marker-5e1f-2"}  # a secret, and one naming gpu-gate
    r = _repo(make_repo, SNOOP)
    p = gate("check", "--base", "main", cwd=r.path, env=marker)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS    equivalence gate/k_gate.py::k_gate" in p.stdout
    # The base's policy is in force, so the runner's own --policy turns the sandbox off.
    unsandboxed = r.path.parent / "unsandboxed.yml"
    unsandboxed.write_text(POLICY.format(mode="off"))
    off = gate("check", "--base", "main", "--policy", str(unsandboxed), cwd=r.path, env=marker)
    assert off.returncode == 1, off.stdout  # without a sandbox the gate's /proc/PID/environ is in reach
    assert "sandbox-unavailable" in [f["kind"] for f in _results(r)["plan_findings"]]  # and it says so


# --- a job that signals the gate ----------------------------------------------------------------------------


# It looks for the gate that runs it (the gpu-gate process whose working directory is this
# repository: on a shared machine it must never touch anyone else's) and kills it.
KILL_GATE = """import os, signal
    for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:
        try:
            cmd = open(f'/proc/{pid}/cmdline', 'rb').read()
            cwd = os.readlink(f'/proc/{pid}/cwd')
        except OSError:
            continue
        if b'gpu_gate.cli' in cmd and cwd == os.getcwd():
            os.kill(int(pid), signal.SIGKILL)
    if os.getppid() == 1:  # in the sandbox its parent is the namespace's PID 1, which ignores this
        os.kill(1, signal.SIGKILL)
    return x * 3"""


def test_a_job_that_kills_the_gate_cannot(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, KILL_GATE)
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr  # the gate lived to judge the (wrong) kernel
    assert "FAIL    equivalence gate/k_gate.py::k_gate" in p.stdout
    assert _results(r)["results"]
    unsandboxed = r.path.parent / "unsandboxed.yml"  # the runner's own --policy: the base's is in force
    unsandboxed.write_text(POLICY.format(mode="off"))
    off = gate("check", "--base", "main", "--policy", str(unsandboxed), cwd=r.path)
    assert off.returncode == -signal.SIGKILL  # without a sandbox it can: that risk is why `required` exists


# --- signals and the run's end ---------------------------------------------------------------------------


HANG = "import time; time.sleep(300); return x * 2  # hang-marker-{tag}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_kills_the_jobs_writes_the_reports_and_fails(make_repo, sig: int) -> None:  # type: ignore[no-untyped-def]
    tag = f"{sig}-{os.getpid()}"
    r = _repo(make_repo, "import time; time.sleep(1); return x * 2", name="quick_gate")
    r.commit("slow", {"gate/slow_gate.py": SPEC.format(name="slow_gate", body=HANG.format(tag=tag), prelude="")})
    proc = subprocess.Popen([sys.executable, "-m", "gpu_gate.cli", "check", "--base", "main", "--jobs", "2",
                             "--no-cache"], cwd=r.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 300
    while "PASS    equivalence gate/quick_gate.py" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()  # the quick job finished; the slow one hangs
    assert "PASS    equivalence gate/quick_gate.py" in seen, seen
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=60)
    out = seen + rest
    assert proc.returncode == 1, out
    results = {x["job_id"].split("::")[1]: x for x in _results(r)["results"]}
    assert results["quick_gate"]["status"] == "passed"
    name = signal.Signals(sig).name
    assert results["slow_gate"]["status"] == "error" and results["slow_gate"]["reason"] == f"interrupted by {name}"
    assert f"interrupted by {name}" in (r.path / ".gpu-gate" / "out" / "report.md").read_text()
    time.sleep(0.5)
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, f"hang-marker-{tag}")]
    assert not leftovers, "a job's process outlived the interrupted gate"


def _cmdline_has(pid: str, text: str) -> bool:
    try:
        return text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# --- a daemon that rewrites the reports after the gate exits ----------------------------------------------


REWRITER = """import subprocess, os
    out = os.path.join(os.getcwd(), '.gpu-gate', 'out', 'results.json')
    script = f"while true; do echo PWNED > {{out}} 2>/dev/null; sleep 0.1; done  # rewriter-{tag}"
    subprocess.run(['sh', '-c', f"setsid sh -c '{{script}}' >/dev/null 2>&1 &"], check=True)
    return x * 2"""


@pytest.mark.parametrize("mode", ["required", "off"])
def test_a_daemon_cannot_rewrite_the_reports_after_the_gate_exits(make_repo, mode: str) -> None:  # type: ignore[no-untyped-def]
    tag = f"{mode}-{os.getpid()}"
    r = _repo(make_repo, REWRITER.format(tag=tag), mode=mode)
    (r.path / ".gpu-gate" / "out").mkdir(parents=True)
    p = gate("check", "--base", "main", "--no-cache", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "escaped-process" in (r.path / ".gpu-gate" / "out" / "results.json").read_text()
    time.sleep(1.0)  # a survivor would have rewritten the file by now
    assert not [q for q in os.listdir("/proc") if q.isdigit() and _cmdline_has(q, f"rewriter-{tag}")]
    assert _results(r)["results"], "the reports were rewritten after the gate exited"


# --- cache laundering across two commits --------------------------------------------------------------------


PLANT = """import os
ENTRY = {entry!r}
PATH = {path!r}
try:
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    with open(PATH, 'w') as f:
        f.write(ENTRY)
except OSError:
    pass"""


@pytest.mark.parametrize("mode", ["required", "off"])
def test_commit_b_cannot_plant_a_passing_cache_entry_for_commit_c(make_repo, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY.format(mode=mode), "README.md": "x\n", ".gitignore": ".gpu-gate/\n"})
    # Commit C: a wrong kernel. The attacker computes C's entry (here: the gate's own, forged to pass).
    r.branch("c")
    r.commit("wrong", {"csrc/k.cu": KERNEL, "gate/k_gate.py": SPEC.format(name="k_gate", body="return x * 3",
                                                                         prelude="")})
    scratch = tmp_path / "scratch-cache"
    sandboxed = tmp_path / "sandboxed.yml"  # an unsandboxed run stores no entry: make one to forge
    sandboxed.write_text(POLICY.format(mode="required"))
    first = gate("check", "--base", "main", "--cache-dir", str(scratch), "--policy", str(sandboxed), cwd=r.path)
    assert first.returncode == 1, first.stdout + first.stderr
    [entry_path] = list(scratch.glob("[0-9a-f][0-9a-f]/*.json"))
    entry = json.loads(entry_path.read_text())
    entry["result"].update(status="passed", findings=[], reason=None)
    forged = json.dumps(entry)
    rel = entry_path.relative_to(scratch)
    # Commit B (another branch): a correct kernel whose spec plants the forged entry while its job runs.
    r.checkout("main")
    r.branch("b")
    target = str(r.path / ".gpu-gate" / "cache" / rel)
    r.commit("plant", {"csrc/other.cu": KERNEL, "gate/b_gate.py": SPEC.format(
        name="b_gate", body="return x * 2", prelude=PLANT.format(entry=forged, path=target)).replace(
            'covers=["csrc/k.cu"]', 'covers=["csrc/other.cu"]')})
    (r.path / ".gpu-gate" / "cache").mkdir(parents=True, exist_ok=True)
    b = gate("check", "--base", "main", cwd=r.path)
    assert b.returncode == 0, b.stdout + b.stderr
    r.checkout("c")
    c = gate("check", "--base", "main", *(["--policy", str(sandboxed)] if mode == "off" else []), cwd=r.path)
    assert c.returncode == 1, c.stdout + c.stderr
    assert "cached" not in c.stdout.split("running")[1].splitlines()[0]
    assert "FAIL    equivalence gate/k_gate.py::k_gate" in c.stdout


def test_the_same_forgery_without_a_sandbox_would_have_passed(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The twin that shows the attack is real: an entry placed in the cache directory by anyone but
    the gate, when nothing stops it, makes the wrong kernel pass. (The sandbox and the emptying of
    the cache after an unsandboxed run are what stop it above.)"""
    r = make_repo("proj", {".gpu-gate.yml": POLICY.format(mode="required"), "README.md": "x\n"})
    r.branch("c")
    r.commit("wrong", {"csrc/k.cu": KERNEL, "gate/k_gate.py": SPEC.format(name="k_gate", body="return x * 3",
                                                                         prelude="")})
    cache = r.path / ".gpu-gate" / "cache"
    assert gate("check", "--base", "main", cwd=r.path).returncode == 1
    [entry_path] = list(cache.glob("[0-9a-f][0-9a-f]/*.json"))
    entry = json.loads(entry_path.read_text())
    entry["result"].update(status="passed", findings=[], reason=None)
    entry_path.write_text(json.dumps(entry))
    laundered = gate("check", "--base", "main", cwd=r.path)
    assert laundered.returncode == 0 and "cached" in laundered.stdout


def test_a_cache_directory_the_commit_carries_is_not_used(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY.format(mode="required"), "README.md": "x\n",
                           ".gitignore": ".gpu-gate/\n"})
    r.branch("c")
    r.commit("wrong", {"csrc/k.cu": KERNEL, "gate/k_gate.py": SPEC.format(name="k_gate", body="return x * 3",
                                                                         prelude="")})
    cache = r.path / ".gpu-gate" / "cache"
    assert gate("check", "--base", "main", cwd=r.path).returncode == 1
    [entry_path] = list(cache.glob("[0-9a-f][0-9a-f]/*.json"))
    entry = json.loads(entry_path.read_text())
    entry["result"].update(status="passed", findings=[], reason=None)
    entry_path.write_text(json.dumps(entry))
    r.git("add", "-f", str(entry_path.relative_to(r.path)))
    r.git("commit", "-q", "-m", "ship a cache entry")
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout
    assert "result cache: not used, since this commit carries its directory .gpu-gate/cache" in p.stderr
