"""What the jobs' sandbox costs: one trivial job (a two-case equivalence spec on the CPU) run by the
executor with each sandbox this machine has, and without one; the median of ``--repeats`` runs each.

    python bench/bench_sandbox.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gpu_gate.executor import sandbox
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import Status
from gpu_gate.protocol.jobs import Job, SpecRef

SPEC = """\
import gpu_gate as gg

@gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x * 2)
def trivial(x):
    return x * 2
"""


def _time(root: Path, job: Job, box: sandbox.Available, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.monotonic()
        [r] = execute([job], ExecOptions(repo_root=root, gpus=(), timeout_s=300, sandbox=box,
                                         sandbox_mode="auto" if box.works else "off"))
        times.append(time.monotonic() - start)
        assert r.status is Status.PASSED, (r.reason, r.log_tail)
    return times


def startup(root: Path, box: sandbox.Available, repeats: int) -> float:
    """Median wall time of starting an interpreter that does nothing, inside ``box``: the sandbox's
    own cost, without the noise of a job."""
    import os
    import sys

    from gpu_gate import proc

    work = Path(tempfile.mkdtemp())
    (work / "w").mkdir()
    layout = sandbox.Layout(repo=root, jobdir=work / "w", hide=(work,), readonly=sandbox.python_install_paths())
    fd = os.open(os.devnull, os.O_WRONLY)
    argv = sandbox.wrap(box, layout, [sys.executable, "-I", "-c", "pass"], fd)
    times = []
    for _ in range(repeats):
        r = proc.run(argv, cwd=root, pass_fds=(fd,) if box.works else ())
        assert r.ok, r.stderr
        times.append(r.duration_s)
    os.close(fd)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp())
    (root / "gate").mkdir()
    (root / "gate" / "t_gate.py").write_text(SPEC)
    job = Job(id="equivalence:gate/t_gate.py::trivial", check="equivalence", level="required", kernels=(),
              spec=SpecRef("gate/t_gate.py", "trivial"), options={"cases": 2, "growth": False, "shrink": False})
    boxes = [sandbox.Available("none", None, "no sandbox")]
    best = sandbox.probe()
    if best.works:
        boxes.append(best)
    import shutil

    if best.kind == "bwrap" and shutil.which("unshare"):
        u = sandbox.Available("unshare", shutil.which("unshare"), "unshare")
        if sandbox._try([*sandbox._unshare_base(u.path or "unshare"), "--", "true"]) is None:
            boxes.append(u)
    for box in boxes:
        print(f"{box.kind:8} interpreter start: median {startup(root, box, 4 * args.repeats) * 1000:.0f} ms")
    _time(root, job, boxes[0], 1)  # warm the page cache
    base = None
    for box in boxes:
        t = statistics.median(_time(root, job, box, args.repeats))
        base = base if base is not None else t
        print(f"{box.kind:8} median {t:.3f}s per job  (+{t - base:.3f}s)")


if __name__ == "__main__":
    main()
