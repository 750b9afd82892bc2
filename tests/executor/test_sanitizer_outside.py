"""compute-sanitizer's front end runs outside the worker's sandbox, out of the code under review's reach.

The tool's collector lives in the candidate's process (that is how the tool works), but the front end
that writes the XML report and sets the exit code is the gate's: the worker's sandbox is the tool's
program, in a PID and mount namespace of its own. The two share only a new, empty network namespace,
through which the tool talks to its collector (measured on an H100: across network namespaces it never
connects; sharing an empty one it reports as it does with no sandbox).

These tests run real sandboxes (bubblewrap, which CI installs, and util-linux's unshare) with a
stand-in for compute-sanitizer that behaves as the real one does towards its program: it writes its
report, runs the program with its descriptors, and exits with the error code. The attack, a
candidate that rewrites the report to hide a planted overrun, is also run without a sandbox, where
it succeeds: the attack is real, and the separation is what stops it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import pytest

from gpu_gate.executor import containment, control, job as executor_job, scheduling, sandbox
from gpu_gate import proc
from gpu_gate.judge.checks import CHECKS
from gpu_gate.judge.checks import sanitizer as check
from gpu_gate.executor.options import ExecOptions
from gpu_gate.findings import JobResult, Status
from gpu_gate.protocol.jobs import Job, SpecRef
from test_sandbox import BOXES, NONE, _ids, needs_box

BWRAP = [b for b in BOXES if b.kind == "bwrap"]
UNSHARE = [b for b in BOXES if b.kind == "unshare"]
needs_bwrap = pytest.mark.skipif(not BWRAP, reason="bwrap does not work here")
needs_unshare = pytest.mark.skipif(not UNSHARE, reason="unshare does not work here")

DATA = Path(__file__).parent.parent / "data" / "sanitizer"

# Stands in for compute-sanitizer: writes its report first (records are saved as they come), runs its
# program with every descriptor it inherited (the worker's socket to the judge), exits with the error
# code when the report has errors. It also records where it ran, for the namespace test.
TOOL = '''#!{python}
import json, os, pathlib, shutil, subprocess, sys
args = sys.argv[1:]
if args in (["--help"], ["--version"]):
    print("NVIDIA (R) Compute Sanitizer\\nVersion 2025.3.1.0 (build 1) (public-release)")
    sys.exit(0)
save = pathlib.Path(args[args.index("--save") + 1])
errors = os.environ.get("TOOL_ERRORS")
if errors:
    shutil.copy(errors, save)
else:
    save.write_text('<?xml version="1.0" encoding="utf-8"?>\\n<ComputeSanitizerOutput>\\n</ComputeSanitizerOutput>\\n')
where = os.environ.get("TOOL_WHERE")
if where:
    pathlib.Path(where).write_text(json.dumps({{"pid_ns": os.readlink("/proc/self/ns/pid"),
        "net_ns": os.readlink("/proc/self/ns/net"), "tmpdir": os.environ.get("TMPDIR")}}))
program = args[args.index("--show-backtrace") + 2:]
while program and program[0].startswith("--"):
    program = program[2:]
first = os.environ.get("TOOL_STUCK_FIRST")  # "N PATH": the first N runs hang (counted in PATH)
times = int(first.split(" ", 1)[0]) if first else 0
count = pathlib.Path(first.split(" ", 1)[1]) if first else None
if os.environ.get("TOOL_STUCK") or (count and len(count.read_text() if count.exists() else "") < times):
    # what the real tool's injected bwrap init did on an H100: it hung before it started the
    # waiter; here bwrap waits for a byte that never comes, before it starts its command
    if count:
        with open(count, "a") as f:
            f.write("x")
    never, held = os.pipe()  # this tool holds the write end: bwrap waits until it is killed
    os.set_inheritable(never, True)
    program = [program[0], "--block-fd", str(never), *program[1:]]
child = subprocess.Popen(program, close_fds=False)
if os.environ.get("TOOL_STOP_INIT"):
    # what the real tool's injected bwrap init did on an H100: it stops answering (it spun), so the
    # sandbox's monitor never learns that the worker ended, and this program never ends by itself
    import signal, time
    def kids(pid):
        try:
            return [int(c) for c in open(f"/proc/{{pid}}/task/{{pid}}/children").read().split()]
        except OSError:
            return []
    for _ in range(2000):
        inits = [i for i in kids(child.pid) if kids(i)]  # the init, once it has started the waiter
        if inits:
            os.kill(inits[0], signal.SIGSTOP)
            break
        time.sleep(0.005)
if os.environ.get("TOOL_LEAVE") and os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import time
        time.sleep(60)
    os._exit(0)
rc = child.wait()
sys.exit(86 if errors else rc)
'''


def _tool(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "compute-sanitizer"
    path.write_text(TOOL.format(python=sys.executable))
    path.chmod(0o755)
    return path


# --- the separation itself --------------------------------------------------------------------------

# The worker's side: what it can see of the tool and of the tool's report, and what it can do to it.
PEEK = """
import json, os, sys
report = sys.argv[1]
needle = b"--" + b"save"  # spelled so that this program's own command line does not hold it
seen = [p for p in os.listdir("/proc") if p.isdigit() and needle in open(f"/proc/{p}/cmdline", "rb").read()]
try:
    with open(report, "w") as f:
        f.write("<ComputeSanitizerOutput/>")
    wrote = True
except OSError:
    wrote = False
print(json.dumps({"pid_ns": os.readlink("/proc/self/ns/pid"), "net_ns": os.readlink("/proc/self/ns/net"),
                  "sees_tool": bool(seen), "wrote_report": wrote, "tmpdir": os.environ.get("TMPDIR")}))
"""


@pytest.mark.parametrize("box", [*BWRAP, NONE], ids=_ids([*BWRAP, NONE]))
def test_the_tool_runs_outside_the_sandbox_and_shares_only_its_empty_network(tmp_path: Path,
                                                                            box: sandbox.Available) -> None:
    outer = tmp_path / "job"
    workdir = outer / "w"
    workdir.mkdir(parents=True)
    tool = _tool(tmp_path / "bin")
    report = outer / "memcheck.w.xml"
    tool_argv = [str(tool), "--save", str(report), "--show-backtrace", "device"]
    layout = sandbox.Layout(repo=tmp_path, jobdir=workdir, hide=(outer,), readonly=sandbox.python_install_paths())
    env = {**os.environ, "TMPDIR": str(workdir), "TOOL_WHERE": str(tmp_path / "where.json")}
    with open(tmp_path / "count", "w+b") as count:
        argv = sandbox.wrap(box, layout, [sys.executable, "-c", PEEK, str(report)], count.fileno(), tool_argv)
        res = proc.run(argv, env=env, timeout=60, pass_fds=(count.fileno(),))
    assert res.returncode == 0, res.describe() + res.stderr
    worker = json.loads(res.stdout.strip().splitlines()[-1])
    tool_side = json.loads((tmp_path / "where.json").read_text())
    host_net = os.readlink("/proc/self/ns/net")
    # the tool finds its collector through the TMPDIR they share (with another one it never connects)
    assert worker["tmpdir"] == tool_side["tmpdir"] == str(workdir)
    if not box.works:  # the attack is real: without a sandbox the worker reaches the tool and its report
        assert worker["sees_tool"] and worker["wrote_report"]
        return
    assert tool_side["pid_ns"] == os.readlink("/proc/self/ns/pid")  # the tool is the gate's, outside
    assert worker["pid_ns"] != tool_side["pid_ns"] and not worker["sees_tool"]
    assert worker["net_ns"] == tool_side["net_ns"] != host_net  # one network, and not the host's
    assert not worker["wrote_report"]
    assert "<record>" not in report.read_text() and "ComputeSanitizerOutput/" not in report.read_text()


def test_the_outer_network_namespace_is_made_only_where_a_tool_runs(tmp_path: Path) -> None:
    box = sandbox.Available("bwrap", "/usr/bin/bwrap", "bwrap")
    layout = sandbox.Layout(repo=tmp_path, jobdir=tmp_path / "w")
    plain = sandbox.wrap(box, layout, ["worker"], 9)
    assert plain[0] == "/usr/bin/bwrap" and "--unshare-net" in plain and plain[-1] == "worker"
    watched = sandbox.wrap(box, layout, ["worker"], 9, ["tool", "--save", "r.xml"])
    at = watched.index("tool")
    assert "--unshare-net" in watched[:at]  # the tool's own namespace, which the sandbox keeps
    assert watched[at:at + 3] == ["tool", "--save", "r.xml"] and watched[at + 3] == "/usr/bin/bwrap"
    assert "--unshare-net" not in watched[at:] and "--unshare-pid" in watched[at:]
    assert watched[-1] == "worker"


# --- the attack: a candidate that rewrites the report ------------------------------------------------

# The forger's means, shared with the GPU test (tests/gpu/test_sandbox_gpu.py): one harmless record
# naming the kernel, which "explains" the tool's error code, and every report the worker can find.
FORGERY = '''\
import glob, os

FORGED = """<?xml version="1.0" encoding="utf-8"?>
<ComputeSanitizerOutput>
  <record><kind>Api</kind><level>Info</level><what><text>Program hit nothing</text></what>
    <where><func>@KERNEL@</func></where></record>
</ComputeSanitizerOutput>
"""


def _reports():
    """Every report the worker can find: the tool's command line, its own directory and the one above."""
    found = set()
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            args = open(p, "rb").read().split(b"\\0")
        except OSError:
            continue
        if b"--save" in args:
            found.add(args[args.index(b"--save") + 1].decode())
    tmp = os.environ.get("TMPDIR", ".")
    found.update(glob.glob(os.path.join(tmp, "*.xml")) + glob.glob(os.path.join(tmp, "..", "*.xml")))
    return found
'''


def forgery(kernel: str) -> str:
    """The source of a module with ``FORGED`` (a report on ``kernel``) and ``_reports()``."""
    return FORGERY.replace("@KERNEL@", kernel)


KERNEL = forgery("tail_oob") + '''

def double(x, forge):
    if forge:
        for path in _reports():
            try:
                with open(path, "w") as f:
                    f.write(FORGED)  # one harmless record: the error code is then "explained"
            except OSError:
                pass
    return x * 2
'''

SPEC = '''\
import gpu_gate as gg
from kern import double


@gg.spec(dims={{"n": gg.Dim(1, 64)}}, inputs={{"x": gg.Tensor(("n",), dtypes=["float32"])}},
         reference=lambda x: x * 2)
def {name}(x):
    return double(x, {forge})
'''


def _memcheck(root: Path, name: str, forge: bool) -> Job:
    (root / "gate").mkdir(exist_ok=True)
    (root / "gate" / f"{name}_gate.py").write_text(SPEC.format(name=name, forge=forge))
    ref = SpecRef(f"gate/{name}_gate.py", name)
    return Job(id=f"memcheck:{ref.id}", check="memcheck", level="required", kernels=("kern.py",), spec=ref,
               options={"cases": 2, "kernel_names": ["tail_oob"]})


@pytest.fixture()
def cpu_sanitizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The memcheck job runs on this machine's CPU, its worker under the stand-in tool."""
    monkeypatch.setitem(CHECKS, "memcheck", dataclasses.replace(CHECKS["memcheck"], needs_gpu=False))
    monkeypatch.setattr(check, "has_gpu", lambda ctx=None: True)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "kern.py").write_text(KERNEL)
    return _tool(tmp_path / "bin")


def _gate(tmp_path: Path, tool: Path, one: Job, box: sandbox.Available, errors: bool,
          monkeypatch: pytest.MonkeyPatch) -> JobResult:
    if errors:  # the planted overrun, as the real tool reported it on an H100
        monkeypatch.setenv("TOOL_ERRORS", str(DATA / "memcheck_cuda_tail_bug_real.xml"))
    else:
        monkeypatch.delenv("TOOL_ERRORS", raising=False)
    opts = ExecOptions(repo_root=tmp_path / "repo", gpus=(), timeout_s=120, sandbox=box,
                       sandbox_mode="auto" if box.works else "off", sanitizer_path=str(tool))
    return executor_job.run_one(one, opts, None)


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_candidate_that_rewrites_the_report_still_fails(tmp_path: Path, box: sandbox.Available,
                                                          cpu_sanitizer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    forger, honest = _memcheck(root, "forger", True), _memcheck(root, "honest", False)
    attacked = _gate(tmp_path, cpu_sanitizer, forger, box, True, monkeypatch)
    assert attacked.status is Status.FAILED, (attacked.reason, attacked.findings)
    assert "invalid-global-read" in {f.kind for f in attacked.findings}
    # the legitimate twins: the same honest kernel is red with the tool's errors and green without
    assert _gate(tmp_path, cpu_sanitizer, honest, box, True, monkeypatch).status is Status.FAILED
    clean = _gate(tmp_path, cpu_sanitizer, honest, box, False, monkeypatch)
    assert clean.status is Status.PASSED, (clean.reason, clean.findings)
    # the forger passes a clean run too: forging found nothing to write
    assert _gate(tmp_path, cpu_sanitizer, forger, box, False, monkeypatch).status is Status.PASSED


def test_the_attack_is_real_where_nothing_separates_the_tool_from_the_worker(
        tmp_path: Path, cpu_sanitizer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forger = _memcheck(tmp_path / "repo", "forger", True)
    forged = _gate(tmp_path, cpu_sanitizer, forger, NONE, True, monkeypatch)
    assert forged.status is Status.PASSED, (forged.reason, forged.findings)


# --- the sandbox's first process, under a tool -------------------------------------------------------

WHO = """
import json, os
def cmd(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\\0") if a]
print(json.dumps({"pid1": cmd(1), "me": os.getpid(), "parent": os.getppid(), "parent_cmd": cmd(os.getppid())}))
"""


def _contained(tmp_path: Path, box: sandbox.Available, program: str, tool: bool) -> containment.Contained:
    outer = tmp_path / "job"
    workdir = outer / "w"
    workdir.mkdir(parents=True, exist_ok=True)
    tool_argv = [str(_tool(tmp_path / "bin")), "--save", str(outer / "memcheck.w.xml"), "--show-backtrace",
                 "device"] if tool else []
    opts = ExecOptions(repo_root=tmp_path, gpus=(), timeout_s=60, sandbox=box, sandbox_mode="required",
                       work_root=tmp_path)
    env = {**os.environ, "TMPDIR": str(workdir)}
    return containment._contained_run([sys.executable, "-c", program], opts, None, workdir, env, 60, box,
                                   control.RunControl(), tool=tool_argv)


def _clean(c: containment.Contained) -> None:
    """A run that ended by itself, left nothing, and that the gate did not have to end."""
    assert c.pr.returncode == 0 and (c.escaped, c.unwatched, c.ended, c.stuck) == (0, False, 0, False), c


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_under_a_tool_the_namespaces_first_process_is_not_a_shell(tmp_path: Path, box: sandbox.Available) -> None:
    """With a shell as the namespace's PID 1, the real compute-sanitizer never exited (H100): under a
    tool, bwrap's own init is PID 1 and the waiter PID 2."""
    pr, n, *_ = _contained(tmp_path, box, WHO, tool=True)
    seen = json.loads(pr.stdout.strip().splitlines()[-1])
    assert not os.path.basename(seen["pid1"][0]).endswith("sh"), seen
    assert seen["parent"] == 2 and os.path.basename(seen["parent_cmd"][0]) == "bash", seen  # the waiter
    assert pr.returncode == 0 and n == 0
    # without a tool the waiter is PID 1, where no signal from inside can end it
    pr, n, *_ = _contained(tmp_path, box, WHO, tool=False)
    seen = json.loads(pr.stdout.strip().splitlines()[-1])
    assert os.path.basename(seen["pid1"][0]) == "bash" and seen["parent"] == 1, seen


KILL_THE_WAITER = """
import os, signal, time
if os.fork() == 0:
    time.sleep(30)  # would outlive the worker, and be counted, if the waiter lived to count it
    os._exit(0)
os.kill(os.getppid(), signal.SIGKILL)
time.sleep(5)
"""


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_worker_that_kills_the_waiter_under_a_tool_is_caught(tmp_path: Path, box: sandbox.Available) -> None:
    """Under a tool the waiter is not PID 1, so the worker can kill it, and with it the count of what
    it left behind: that is itself an escape attempt. The twins: a worker that leaves a process
    behind is counted; one that does neither is clean."""
    c = _contained(tmp_path, box, KILL_THE_WAITER, tool=True)
    assert c.unwatched is True, c
    c = _contained(tmp_path, box, "import os, time\nif os.fork() == 0:\n    time.sleep(30)\n", tool=True)
    assert c.escaped == 1 and not c.unwatched and not c.ended, c
    c = _contained(tmp_path, box, "print('ok')", tool=True)
    _clean(c)


# --- a sandbox that does not end with its worker ------------------------------------------------------

@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_sandbox_that_outlives_its_worker_under_a_tool_is_ended(tmp_path: Path, box: sandbox.Available,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On an H100, bwrap's init under the real tool now and then spun instead of reporting that the
    worker had ended: the tool never ended, and the gate waited out the job's time limit. The
    stand-in tool stops the init once it has started the worker, which has the same effect. The
    gate ends the sandbox a grace after the waiter's last word, and the run is over in seconds.
    The twin: a sandbox that ends by itself is left alone."""
    monkeypatch.setattr(containment, "TOOL_EXIT_GRACE_S", 1.0)
    monkeypatch.setenv("TOOL_STOP_INIT", "1")
    t = time.monotonic()
    c = _contained(tmp_path, box, "print('ok')", tool=True)
    assert not c.pr.timed_out and time.monotonic() - t < 30, c.pr.describe()
    assert c.pr.stdout.strip() == "ok" and (c.escaped, c.unwatched, c.ended, c.stuck) == (0, False, 2, False), c
    monkeypatch.delenv("TOOL_STOP_INIT")
    c = _contained(tmp_path, box, "print('ok')", tool=True)
    _clean(c)


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_nothing_a_watched_run_leaves_outlives_it(tmp_path: Path, box: sandbox.Available,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """What leaves the tool's process tree (on an H100, sandbox processes orphaned when their
    monitor died) comes to the gate, which kills it when the run ends."""
    monkeypatch.setenv("TOOL_LEAVE", "1")
    before = set(os.listdir("/proc"))
    c = _contained(tmp_path, box, "print('ok')", tool=True)
    assert c.pr.returncode == 0 and c.ended == 1, c
    left = [p for p in set(os.listdir("/proc")) - before if p.isdigit() and _sleeps(p)]
    assert not left, left


def _sleeps(pid: str) -> bool:
    """A live process of the stand-in tool (the daemon it leaves is a fork of it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X") and b"compute-sanitizer" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_sanitizer_job_whose_sandbox_outlives_its_worker_is_judged(tmp_path: Path, box: sandbox.Available,
                                                                     cpu_sanitizer: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole job, where the stuck sandbox also held the worker's end of the judge's socket:
    judged in seconds, its report read (red with the tool's errors, green without), with a note."""
    monkeypatch.setattr(containment, "TOOL_EXIT_GRACE_S", 1.0)
    monkeypatch.setenv("TOOL_STOP_INIT", "1")
    honest = _memcheck(tmp_path / "repo", "honest", False)
    t = time.monotonic()
    red = _gate(tmp_path, cpu_sanitizer, honest, box, True, monkeypatch)
    green = _gate(tmp_path, cpu_sanitizer, honest, box, False, monkeypatch)
    assert time.monotonic() - t < 90
    assert red.status is Status.FAILED and "invalid-global-read" in {f.kind for f in red.findings}, red.findings
    assert green.status is Status.PASSED, (green.reason, green.findings)
    assert "sandbox-ended" in {f.kind for f in green.findings}


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_sandbox_that_never_starts_its_worker_under_a_tool_is_ended(tmp_path: Path, box: sandbox.Available,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On an H100 the injected init hung before it started the waiter: the worker never ran, and the
    tool waited for it for ever. The gate ends such a sandbox once the start limit has passed, and
    says the run was stuck; the twin, a sandbox that starts, is not."""
    monkeypatch.setattr(containment, "TOOL_START_LIMIT_S", 1.0)
    monkeypatch.setenv("TOOL_STUCK", "1")
    t = time.monotonic()
    c = _contained(tmp_path, box, "print('ok')", tool=True)
    assert not c.pr.timed_out and time.monotonic() - t < 30, c.pr.describe()
    assert c.stuck and c.ended >= 1 and c.pr.stdout == "" and not c.unwatched, c
    monkeypatch.delenv("TOOL_STUCK")
    c = _contained(tmp_path, box, "print('ok')", tool=True)
    _clean(c)
    assert c.pr.stdout.strip() == "ok"


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_sanitizer_job_whose_sandbox_never_starts_fails_closed_or_is_run_again(
        tmp_path: Path, box: sandbox.Available, cpu_sanitizer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole job: a sandbox that never starts under the tool, every time, is an error that
    checked nothing (never a pass); one that hangs now and then is run again and judged as ever (red
    with the tool's errors), with a note that says so. On an H100 one job hung twice in a row (its
    candidate's sandbox, then its base's)."""
    monkeypatch.setattr(containment, "TOOL_START_LIMIT_S", 1.0)
    # the waits between starts, scaled down with the start limit (10 s to 1 s)
    monkeypatch.setattr(containment, "RESTART_WAITS_S", tuple(w / 10 for w in containment.RESTART_WAITS_S))
    honest = _memcheck(tmp_path / "repo", "honest", False)
    monkeypatch.setenv("TOOL_STUCK", "1")
    t = time.monotonic()
    stuck = _gate(tmp_path, cpu_sanitizer, honest, box, False, monkeypatch)
    assert time.monotonic() - t < 90
    # the runner's failure, not the kernel's: not run (runner.infrastructure's default), with the reason
    assert stuck.status is Status.NOT_RUN and stuck.findings[0].kind == "infrastructure", stuck.findings
    assert {"sandbox-stuck", "retried"} <= {f.kind for f in stuck.findings}
    assert "never started the worker" in (stuck.reason or "")
    monkeypatch.delenv("TOOL_STUCK")
    count = tmp_path / "stuck-count"
    monkeypatch.setenv("TOOL_STUCK_FIRST", f"2 {count}")
    again = _gate(tmp_path, cpu_sanitizer, honest, box, True, monkeypatch)
    assert again.status is Status.FAILED and "invalid-global-read" in {f.kind for f in again.findings}, again.findings
    # the stuck sandbox is started again after a short wait, on the same socket; the job is not run again whole
    notes = [f for f in again.findings if f.kind == "retried"]
    assert count.read_text() == "xx" and len(notes) == 1, notes
    assert sum(notes[0].details["sandbox_restarts"].values()) == 2, notes[0]
    assert "was started again on the same inputs" in notes[0].message, notes[0].message
    # how long the sandbox that did start took, for the start limit to be measured against
    started = again.extra.timing["outside"]["sandbox_start_s"]
    assert 0 < started["candidate"] < containment.TOOL_START_LIMIT_S, started


# --- unshare: the tool stays inside the sandbox, and the run says what that costs ----------------------

@needs_unshare
def test_under_unshare_the_tool_runs_inside_and_its_report_is_in_reach(tmp_path: Path, cpu_sanitizer: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On an H100 the unshare sandbox's jobs under the real tool, run from outside, failed where the
    bwrap ones passed: under unshare the tool runs inside, as it always did. The attack then works,
    and the run carries a ``sandbox-weak`` warning that says so; the honest twins are judged as ever."""
    [box] = UNSHARE
    assert not box.tool_outside and BWRAP[0].tool_outside if BWRAP else not box.tool_outside
    root = tmp_path / "repo"
    forger, honest = _memcheck(root, "forger", True), _memcheck(root, "honest", False)
    forged = _gate(tmp_path, cpu_sanitizer, forger, box, True, monkeypatch)
    assert forged.status is Status.PASSED, (forged.reason, forged.findings)  # the known weakness
    assert _gate(tmp_path, cpu_sanitizer, honest, box, True, monkeypatch).status is Status.FAILED
    assert _gate(tmp_path, cpu_sanitizer, honest, box, False, monkeypatch).status is Status.PASSED
    [weak] = scheduling.sandbox_findings(box, "auto")
    assert weak.kind == "sandbox-weak" and weak.severity.value == "warning"
    assert "compute-sanitizer" in weak.message and "bubblewrap" in weak.message
    assert scheduling.sandbox_findings(box, "required") == [weak]


@needs_box
@pytest.mark.parametrize("box", BOXES, ids=_ids(BOXES))
def test_where_the_waiter_is_pid_1_a_kill_from_inside_does_nothing(tmp_path: Path, box: sandbox.Available) -> None:
    """No tool outside (every unshare job, and bwrap's jobs without compute-sanitizer): the waiter is
    PID 1, which no signal from inside can end; it lives, and counts what the worker left."""
    c = _contained(tmp_path, box, KILL_THE_WAITER, tool=False)
    assert c.escaped == 1 and not c.unwatched, c  # the waiter lived and counted the daemon
