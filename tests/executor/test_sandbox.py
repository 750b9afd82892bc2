"""The jobs' sandbox, attacked as a pull request's code would attack it, each attack with its legitimate twin.

Jobs are real subprocesses running the real harness in a real sandbox (bubblewrap, which CI installs,
and util-linux's unshare). Each attack is also run without a sandbox, where it succeeds: that shows
the attack is real, and the sandbox is what stops it.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from gpu_gate.executor import argv, sandbox, scheduling
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import JobResult, Status
from gpu_gate.protocol.jobs import Job, SpecRef

SPEC = """\
import gpu_gate as gg
{prelude}

@gg.spec(dims={{"n": gg.Dim(1, 64)}}, inputs={{"x": gg.Tensor(("n",))}}, reference=lambda x: x * 2)
def {name}(x):
    {body}
"""


def _kinds() -> list[sandbox.Available]:
    out = []
    if shutil.which("bwrap"):
        out.append(sandbox.Available("bwrap", shutil.which("bwrap"), "bwrap"))
    u = shutil.which("unshare")
    if u and sandbox._try([*sandbox._unshare_base(u), "--", "true"]) is None:
        out.append(sandbox.Available("unshare", u, "unshare"))
    return out


BOXES = _kinds()
NONE = sandbox.Available("none", None, "test: no sandbox")
needs_box = pytest.mark.skipif(not BOXES, reason="neither bwrap nor unshare works here")


def _job(root: Path, name: str, body: str, prelude: str = "") -> Job:
    (root / "gate").mkdir(exist_ok=True)
    (root / "gate" / f"{name}_gate.py").write_text(SPEC.format(name=name, body=body, prelude=prelude))
    return Job(id=f"equivalence:gate/{name}_gate.py::{name}", check="equivalence", level="required", kernels=(),
               spec=SpecRef(f"gate/{name}_gate.py", name), options={"cases": 2, "growth": False, "shrink": False})


def _run(root: Path, jobs: list[Job], box: sandbox.Available, **kw: object) -> dict[str, JobResult]:
    opts = ExecOptions(repo_root=root, gpus=(), timeout_s=120, workers=2, sandbox=box,
                       sandbox_mode="auto" if box.works else "off", **kw)  # type: ignore[arg-type]
    return {r.job_id.split("::")[1]: r for r in execute(jobs, opts)}


def _ids(boxes: list[sandbox.Available]) -> list[str]:
    return [b.kind for b in boxes]


# --- the gate's processes are out of sight --------------------------------------------------------------


LOOK_FOR_GATE = ("import os\n"
                 "    if os.path.exists('/proc/{pid}/environ'):\n"
                 "        return x * 3  # it sees the gate: a kernel that games the test would behave now\n"
                 "    return x * 2")


@needs_box
@pytest.mark.parametrize("box", BOXES, ids=_ids(BOXES))
def test_a_job_cannot_see_the_gates_process(tmp_path: Path, box: sandbox.Available) -> None:
    jobs = [_job(tmp_path, "look", LOOK_FOR_GATE.format(pid=os.getpid())), _job(tmp_path, "plain", "return x * 2")]
    res = _run(tmp_path, jobs, box)
    assert res["look"].status is Status.PASSED, res["look"].reason
    assert res["plain"].status is Status.PASSED
    unboxed = _run(tmp_path, jobs[:1], NONE)  # the attack is real without a sandbox
    assert unboxed["look"].status is Status.FAILED


# --- nothing of the gate's is writable --------------------------------------------------------------------


WRITE_ALL = """import os, gpu_gate
    hits = []
    for d in {targets!r} + ([os.path.dirname(gpu_gate.__file__)] if {package} else []):
        try:
            with open(os.path.join(d, 'planted.txt'), 'w') as f:
                f.write('planted')
            hits.append(d)
        except OSError:
            pass
    scratch = os.path.join(os.environ['TMPDIR'], 'mine.txt')  # its own temporary directory: allowed
    open(scratch, 'w').write('ok')
    assert open(scratch).read() == 'ok'
    return x * 2"""


@needs_box
@pytest.mark.parametrize("box", BOXES, ids=_ids(BOXES))
def test_a_job_cannot_write_the_reports_the_cache_the_repository_or_gpu_gate(tmp_path: Path,
                                                                             box: sandbox.Available) -> None:
    repo = tmp_path / "repo"
    out, cache = repo / ".gpu-gate" / "out", repo / ".gpu-gate" / "cache"
    for d in (out, cache):
        d.mkdir(parents=True)
    targets = [str(out), str(cache), str(repo / "gate")]
    job = _job(repo, "writer", WRITE_ALL.format(targets=targets, package=True))
    res = _run(repo, [job], box, hide=(out, cache))
    assert res["writer"].status is Status.PASSED, res["writer"].reason  # its own TMPDIR works
    import gpu_gate

    for d in [*targets, os.path.dirname(gpu_gate.__file__)]:
        assert not (Path(d) / "planted.txt").exists(), f"the job wrote into {d}"
    # Without a sandbox the same job writes the reports and the cache (the package is left alone here).
    unboxed_job = _job(repo, "writer", WRITE_ALL.format(targets=targets, package=False))
    _run(repo, [unboxed_job], NONE, hide=(out, cache))
    assert (out / "planted.txt").exists() and (cache / "planted.txt").exists()


@needs_box
@pytest.mark.parametrize("box", BOXES, ids=_ids(BOXES))
def test_a_job_cannot_write_another_jobs_result(tmp_path: Path, box: sandbox.Available) -> None:
    """Every job's directory is hidden from every other job: a job cannot forge a neighbour's result."""
    forge = ("import glob, json, os, time\n"
             "    for _ in range(40):\n"
             "        for p in glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.environ['TMPDIR'])), '*', '*', 'in.json'))"
             " + glob.glob('/tmp/*/*/in.json'):\n"
             "            d = json.load(open(p))\n"
             "            if d['job']['id'].endswith('::victim'):\n"
             "                out = os.path.join(os.path.dirname(p), 'out.json')\n"
             "                try:\n"
             "                    open(out, 'w').write(json.dumps({'job_id': d['job']['id'], 'check': 'equivalence', "
             "'status': 'passed', 'level': 'required'}))\n"
             "                except OSError:\n"
             "                    pass\n"
             "        time.sleep(0.1)\n"
             "    return x * 2")
    victim = _job(tmp_path, "victim", "import time; time.sleep(3); return x * 3")  # wrong, and slow
    res = _run(tmp_path, [_job(tmp_path, "forger", forge), victim], box)
    assert res["victim"].status is Status.FAILED, res["victim"].reason


# --- nothing outlives its job -----------------------------------------------------------------------------


# The daemon has escaped before the job returns (an attacker makes sure of that): under load, a daemon
# still in the job's process group when the job ends dies with it, and there is nothing to find.
DAEMON = """import os, subprocess, time
    subprocess.run(['sh', '-c', "setsid sh -c ': {marker}; while true; do sleep 0.2; done' >/dev/null 2>&1 &"],
                   check=True)
    def escaped():
        for p in os.listdir('/proc'):
            try:
                if p.isdigit() and b'{marker}' in open('/proc/' + p + '/cmdline', 'rb').read() and \
                        os.getpgid(int(p)) != os.getpgid(0):
                    return True
            except OSError:
                pass
        return False
    end = time.monotonic() + 20
    while not escaped() and time.monotonic() < end:
        time.sleep(0.05)
    return x * 2"""

CHILD = """import subprocess
    subprocess.run(['sh', '-c', 'sleep 0.2'], check=True)  # a helper process the job waits for: fine
    return x * 2"""


def _alive_with(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


@pytest.mark.parametrize("box", [*BOXES, NONE], ids=_ids([*BOXES, NONE]))
def test_a_setsid_daemon_is_killed_and_reported_and_a_waited_child_is_fine(tmp_path: Path,
                                                                           box: sandbox.Available) -> None:
    marker = f"daemon-marker-{box.kind}-{os.getpid()}"
    jobs = [_job(tmp_path, "daemon", DAEMON.format(marker=marker)), _job(tmp_path, "child", CHILD)]
    res = _run(tmp_path, jobs, box)
    assert not _alive_with(marker), "the daemon outlived its job"
    escaped = [f for f in res["daemon"].findings if f.kind == "escaped-process"]
    assert escaped and res["daemon"].status is Status.FAILED, res["daemon"].findings
    assert res["child"].status is Status.PASSED and not res["child"].findings


LINGER = """import subprocess, time
    if not globals().get('started'):  # one daemon, on the first call
        globals()['started'] = True
        subprocess.run(['sh', '-c', "setsid sh -c ': {marker}; while true; do sleep 0.2; done' >/dev/null 2>&1 &"],
                       check=True)
        time.sleep(4)  # the job runs on after its daemon escaped: the other job ends first
    return x * 2"""

WAIT_FOR = """import os, time
    def seen():
        for p in os.listdir('/proc'):
            try:
                if p.isdigit() and b'{marker}' in open('/proc/' + p + '/cmdline', 'rb').read():
                    return True
            except OSError:
                pass
        return False
    end = time.monotonic() + 3  # in a sandbox it is out of sight: the job ends anyway
    while not seen() and time.monotonic() < end:
        time.sleep(0.05)
    return x * 2"""


@pytest.mark.parametrize("box", [*BOXES, NONE], ids=_ids([*BOXES, NONE]))
def test_a_daemon_is_blamed_on_the_job_that_started_it_not_on_one_that_ended_meanwhile(
        tmp_path: Path, box: sandbox.Available) -> None:
    """Without a sandbox, a daemon is re-parented out of its job's process tree: the job that
    started it must still be the one blamed, even when another job's workers end while it runs
    (before, the first job to end after the escape found it and was failed for it)."""
    marker = f"lingering-daemon-{box.kind}-{os.getpid()}"
    jobs = [_job(tmp_path, "linger", LINGER.format(marker=marker)), _job(tmp_path, "bystander",
                                                                          WAIT_FOR.format(marker=marker))]
    res = _run(tmp_path, jobs, box)
    assert not _alive_with(marker), "the daemon outlived its job"
    assert any(f.kind == "escaped-process" for f in res["linger"].findings), res["linger"].findings
    assert res["linger"].status is Status.FAILED
    assert res["bystander"].status is Status.PASSED, res["bystander"].findings
    assert not res["bystander"].findings


def test_an_escape_blocks_even_in_an_advisory_job(tmp_path: Path) -> None:
    job = _job(tmp_path, "daemon", DAEMON.format(marker=f"advisory-{os.getpid()}"))
    job = Job(**{**job.__dict__, "level": "advisory"})
    res = _run(tmp_path, [job], BOXES[0] if BOXES else NONE)
    assert res["daemon"].level == "required"


# --- the policy decides what happens without a sandbox ----------------------------------------------------


def test_required_runs_no_job_without_a_sandbox_and_says_why(tmp_path: Path) -> None:
    opts = ExecOptions(repo_root=tmp_path, gpus=(), sandbox=NONE, sandbox_mode="required")
    [res] = execute([_job(tmp_path, "plain", "return x * 2")], opts)
    assert res.status is Status.NOT_RUN and "runner.sandbox is required" in (res.reason or "")
    [f] = scheduling.sandbox_findings(NONE, "required")
    assert (f.kind, f.severity.value) == ("sandbox-unavailable", "error")
    [w] = scheduling.sandbox_findings(NONE, "auto")
    assert (w.kind, w.severity.value) == ("sandbox-unavailable", "warning") and "UNSANDBOXED" in w.message
    [n] = scheduling.sandbox_findings(sandbox.choose("off"), "off")
    assert n.severity.value == "note"
    assert scheduling.sandbox_findings(sandbox.Available("bwrap", "/usr/bin/bwrap", "x"), "required") == []


def test_the_probe_explains_a_missing_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    sandbox.probe.cache_clear()
    try:
        got = sandbox.probe()
    finally:
        sandbox.probe.cache_clear()
    assert got.kind == "none"
    assert "bwrap: not installed (apt-get install bubblewrap)" in got.detail
    assert "unshare: not installed" in got.detail


# --- the repository cannot stand in for gpu-gate ---------------------------------------------------------


FAKE_JUDGE = """\
import json, sys
def main():
    job = json.load(open(sys.argv[1]))
    job = job.get("job", job)
    json.dump({"job_id": job["id"], "check": job["check"], "status": "passed", "level": job["level"],
               "reason": "SHADOWED"}, open(sys.argv[2], "w"))
    return 0
if __name__ == "__main__":
    sys.exit(main())
"""


@pytest.mark.parametrize("box", [*BOXES, NONE], ids=_ids([*BOXES, NONE]))
def test_a_repository_gpu_gate_package_does_not_shadow_the_installed_one(tmp_path: Path,
                                                                         box: sandbox.Available) -> None:
    import subprocess
    import sys

    (tmp_path / "gpu_gate" / "judge").mkdir(parents=True)
    (tmp_path / "gpu_gate" / "__init__.py").write_text("")
    (tmp_path / "gpu_gate" / "judge" / "__init__.py").write_text("")
    (tmp_path / "gpu_gate" / "judge" / "job.py").write_text(FAKE_JUDGE)
    (tmp_path / "mylib.py").write_text("def double(x):\n    return x * 3\n")  # the user's own (buggy) code
    job = _job(tmp_path, "wrong", "import mylib; return mylib.double(x)")
    res = _run(tmp_path, [job], box)
    assert res["wrong"].status is Status.FAILED, res["wrong"].reason  # the real harness judged it
    assert res["wrong"].reason != "SHADOWED"
    # The attack is real against `python -m gpu_gate.judge.job` run in the repository:
    (tmp_path / "j.json").write_text(json_job(job))
    old = subprocess.run([sys.executable, "-m", "gpu_gate.judge.job", "j.json", "r.json"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert old.returncode == 0 and "SHADOWED" in (tmp_path / "r.json").read_text()


def json_job(job: Job) -> str:
    import json

    return json.dumps({"job": job.to_json(), "context": {"device": "cpu"}})


def test_the_repository_goes_after_the_standard_library_and_before_site_packages(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "statistics.py").write_text("SHADOW = True\n")
    (tmp_path / "mypkg.py").write_text("MINE = True\n")
    code = ("import sys; from pathlib import Path; from gpu_gate.worker.loader import user_path\n"
            f"user_path(Path({str(tmp_path)!r}))\n"
            "import statistics, mypkg\n"
            "assert not hasattr(statistics, 'SHADOW'), 'stdlib shadowed'\n"
            "assert mypkg.MINE\n"
            "site = [i for i, p in enumerate(sys.path) if 'site-packages' in p]\n"
            f"assert not site or sys.path.index({str(tmp_path)!r}) < site[0], sys.path\n"
            "assert 'torch' in sys.modules, 'torch is imported before the repository is on sys.path'\n")
    r = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --- the job's environment ------------------------------------------------------------------------------


def test_the_jobs_environment_names_nothing_of_gpu_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_GATE_WORK_DIR", "/somewhere")
    monkeypatch.setenv("INPUT_TOKEN", "t")
    opts = ExecOptions(repo_root=tmp_path, gpus=())
    env = argv._env_for(opts, None, tmp_path / "tmpab12cd" / "w", 2, "equivalence", BOXES[0] if BOXES else NONE)
    assert not [k for k in env if "GPU_GATE" in k or k.startswith("INPUT_")]
    assert not [v for k, v in env.items() if ("gpu-gate" in v or "gpu_gate" in v) and not k.startswith("PYTEST_")]
    command = argv.worker_argv(opts, tmp_path / "context.json", role="compiler", fd=3)
    assert command[1] == "-I"


def test_bwrap_mounts_nest_shallow_first_and_hidden_directories_turn_read_only_last(tmp_path: Path) -> None:
    """The repository inside a hidden work root is shown again; the report directory inside the
    repository is hidden again; the job's own directory inside its hidden parent stays writable."""
    work = (tmp_path / "work").resolve()
    repo, jobdir = work / "repo", work / "tmpx" / "w"
    out = repo / ".gpu-gate" / "out"
    for d in (out, jobdir):
        d.mkdir(parents=True)
    argv = sandbox._bwrap_mounts(sandbox.Layout(repo=repo, jobdir=jobdir, hide=(work, out, jobdir.parent)))
    ops = [(argv[i], argv[i + 1]) for i in range(0, len(argv), 1) if argv[i].startswith("--")]
    order = [op for op in ops if op[0] != "--remount-ro"]
    assert order.index(("--tmpfs", str(work))) < order.index(("--ro-bind", str(repo))) < \
        order.index(("--tmpfs", str(out)))
    assert order.index(("--tmpfs", str(jobdir.parent))) < order.index(("--bind", str(jobdir)))
    remounts = [p for o, p in ops if o == "--remount-ro"]
    assert set(remounts) == {str(work), str(out), str(jobdir.parent)}
    assert argv.index("--remount-ro") > argv.index("--bind")


def test_the_bases_tree_is_shown_at_the_repositorys_path_and_nothing_of_the_heads_over_it(tmp_path: Path) -> None:
    """A differential run's base worker: its tree at the repository's own path, with every read-only
    path inside the repository (an editable install's ``src``) taken from the base's tree too, and
    the hidden report directory mounted over only where the base's tree has a place for it."""
    head, base, jobdir = (tmp_path / "head").resolve(), (tmp_path / "base").resolve(), tmp_path / "w"
    for d in (head / "src", head / ".gpu-gate" / "out", base / "src", jobdir):
        d.mkdir(parents=True)
    (head / "build").mkdir()  # only at the head: not mounted over the base's tree
    layout = sandbox.Layout(repo=head, jobdir=jobdir, hide=(head / ".gpu-gate" / "out",),
                            readonly=(head / "src", head / "build"), source=base)
    argv = sandbox._bwrap_mounts(layout)
    binds = [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == "--ro-bind"]
    assert (str(base), str(head)) in binds and (str(base / "src"), str(head / "src")) in binds
    assert not [b for b in binds if b[0].startswith(str(head))]  # nothing of the head's tree
    assert str(head / ".gpu-gate" / "out") not in argv
    script = sandbox._unshare_setup(layout)
    assert f"mount --rbind {base} {head} &&" in script and f"mount --rbind {base / 'src'} {head / 'src'} &&" in script
    assert "build" not in script


def test_gpu_gates_own_package_stays_visible_when_the_reports_lie_inside_its_source_tree(tmp_path: Path) -> None:
    """`gpu-gate demo` run from a source checkout writes its reports under that checkout, which must
    stay hidden: the checkout then cannot be shown, but gpu-gate's package inside it still is (the
    jobs import it from there), read-only."""
    own = sandbox.gate_package_dir()
    reports = own.parent / "gpu-gate-demo" / "reports"
    workdir = tmp_path / "job" / "w"
    workdir.mkdir(parents=True)
    opts = ExecOptions(repo_root=tmp_path, gpus=(), hide=(reports,))
    layout = argv._layout(opts, None, workdir, sandbox.Available("bwrap", "bwrap", "test"))
    shown = {Path(os.path.realpath(p)) for p in layout.readonly}
    assert own in shown
    assert own.parent not in shown  # that would show the reports again
    assert reports in layout.hide
