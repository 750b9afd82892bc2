"""A candidate that rewrites compute-sanitizer's report: a known weakness, kept as a test.

compute-sanitizer's front end, which writes the XML report, runs inside the worker's sandbox today
(docs/trust.md says so): the code under review can find the report (it is named on the tool's command
line, in the worker's own directory) and rewrite it. Here a kernel with a planted overrun rewrites
the report to one harmless record, which "explains" the tool's error exit code, and the gate passes
it. The test is a strict expected failure: it fails the day the report is out of the candidate's
reach (move the front end out of the sandbox, issue 12), and the marker must go then.

The honest twins must pass today: the same kernel without the rewrite is red when the tool reports
errors and green when it does not.

The jobs run in real sandboxes (bubblewrap, which CI installs, and util-linux's unshare), on this
machine's CPU, under a stand-in for compute-sanitizer that saves its report before running its
program, as a tool that saves records as they come would. Whether the real tool saves them as they
come or only at its end was not established (on an H100, this attack with a child process waiting for
the finished report made the real tool wait for that child until the job was killed: an error, which
fails closed, not a pass).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from gpu_gate import executor, sandbox
from gpu_gate.checks import CHECKS
from gpu_gate.checks import sanitizer as check
from gpu_gate.executor import ExecOptions
from gpu_gate.findings import JobResult, Status
from gpu_gate.jobs import Job, SpecRef
from test_sandbox import BOXES, _ids, needs_box

DATA = Path(__file__).parent / "data" / "sanitizer"

# Stands in for compute-sanitizer: writes its report first (records saved as they come), runs its
# program with every descriptor it inherited (the worker's socket to the judge), exits with the error
# code when the report has errors.
TOOL = '''#!{python}
import os, pathlib, shutil, subprocess, sys
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
program = args[args.index("--show-backtrace") + 2:]
while program and program[0].startswith("--"):
    program = program[2:]
rc = subprocess.call(program, close_fds=False)
sys.exit(86 if errors else rc)
'''


def _tool(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "compute-sanitizer"
    path.write_text(TOOL.format(python=sys.executable))
    path.chmod(0o755)
    return path


KERNEL = '''\
import glob, os

FORGED = """<?xml version="1.0" encoding="utf-8"?>
<ComputeSanitizerOutput>
  <record><kind>Api</kind><level>Info</level><what><text>Program hit nothing</text></what>
    <where><func>tail_oob</func></where></record>
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


def _gate(tmp_path: Path, tool: Path, job: Job, box: sandbox.Available, errors: bool,
          monkeypatch: pytest.MonkeyPatch) -> JobResult:
    if errors:  # the planted overrun, as the real tool reported it on an H100
        monkeypatch.setenv("TOOL_ERRORS", str(DATA / "memcheck_cuda_tail_bug_real.xml"))
    else:
        monkeypatch.delenv("TOOL_ERRORS", raising=False)
    opts = ExecOptions(repo_root=tmp_path / "repo", gpus=(), timeout_s=120, sandbox=box, sandbox_mode="required",
                       sanitizer_path=str(tool))
    return executor.run_one(job, opts, None)


@needs_box
@pytest.mark.parametrize("box", BOXES, ids=_ids(BOXES))
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="compute-sanitizer's report shares the worker's sandbox (docs/trust.md; issue 12)")
def test_a_candidate_that_rewrites_the_report_is_still_caught(tmp_path: Path, box: sandbox.Available,
                                                              cpu_sanitizer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forger = _memcheck(tmp_path / "repo", "forger", True)
    attacked = _gate(tmp_path, cpu_sanitizer, forger, box, True, monkeypatch)
    assert attacked.status is Status.FAILED, (attacked.reason, attacked.findings)
    assert "invalid-global-read" in {f.kind for f in attacked.findings}


@needs_box
@pytest.mark.parametrize("box", BOXES, ids=_ids(BOXES))
def test_the_honest_twin_is_red_with_the_tools_errors_and_green_without(
        tmp_path: Path, box: sandbox.Available, cpu_sanitizer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    honest = _memcheck(tmp_path / "repo", "honest", False)
    red = _gate(tmp_path, cpu_sanitizer, honest, box, True, monkeypatch)
    assert red.status is Status.FAILED and "invalid-global-read" in {f.kind for f in red.findings}, red.findings
    green = _gate(tmp_path, cpu_sanitizer, honest, box, False, monkeypatch)
    assert green.status is Status.PASSED, (green.reason, green.findings)
