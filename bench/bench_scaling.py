"""Scaling over the GPUs of one host, and several gates on one machine.

Three measurements, in one command, on whatever GPUs are visible:

1. The synthetic 64-job plan of ``bench_multigpu.py`` on 1, 2, ... GPUs (``--gpus 1,2,4``).
2. ``gpu-gate check --all`` of a real library checkout (``--library PATH``: a git repository with its
   ``.gpu-gate.yml`` and gate specs committed) on the same GPU counts.
3. Several gates at once (``--gates 3``), each on a copy of the synthetic plan: first one gate alone on
   one GPU, then the gates together one per GPU, then all of them on GPU 0.

For every run: wall time, speed-up against one GPU, each GPU's mean utilisation (``nvidia-smi``
sampled every 0.5 s), and where the time went: the start before the first job (planning, the
doctor), the longest job, and the tail (from the last moment every slot was busy to the end).

    python bench/bench_scaling.py [--gpus 1,2,4] [--library PATH] [--gates 3] [--jobs 64] [--matmuls 500]

Not a test. Without a GPU it says so and exits 0. Prints a table last.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_multigpu  # noqa: E402  (the synthetic plan)

# Each job does a fixed amount of GPU work (not a fixed time), so jobs sharing a GPU slow each other as
# real kernels do, and more GPUs can only help by running more of the work at once.
WORK_SPEC = '''\
import torch
import gpu_gate as gg

_A = None

def _work(matmuls):
    global _A
    if _A is None:
        _A = torch.randn(4096, 4096, device="cuda")
    for _ in range(matmuls):
        _A @ _A
    torch.cuda.synchronize()

@gg.spec(dims={{"n": gg.Dim(1, 4096)}}, inputs={{"x": gg.Tensor(("n",))}}, reference=lambda x: x * 2,
         covers=["csrc/k{i:03d}.cu"], devices=("cuda",))
def spec_{i:03d}(x):
    _work({matmuls})
    return x * 2
'''


def build(root: Path, jobs: int, matmuls: int, cases: int) -> Path:
    """A repository whose feature branch adds ``jobs`` kernels, each with a spec doing fixed GPU work."""
    root.mkdir(parents=True)
    repo = root / "repo"
    repo.mkdir()
    (repo / ".gpu-gate.yml").write_text(bench_multigpu.POLICY.format(cases=cases))
    bench_multigpu.git(repo, "init", "-q")
    bench_multigpu.git(repo, "add", "-A")
    bench_multigpu.git(repo, "commit", "-qm", "base")
    bench_multigpu.git(repo, "checkout", "-qb", "feature")
    (repo / "csrc").mkdir()
    (repo / "gate").mkdir()
    for i in range(jobs):
        (repo / f"csrc/k{i:03d}.cu").write_text(f"__global__ void k{i}(float* x) {{ x[0] = {i}.0f; }}\n")
        (repo / f"gate/k{i:03d}_gate.py").write_text(WORK_SPEC.format(i=i, matmuls=max(1, matmuls // cases)))
    bench_multigpu.git(repo, "add", "-A")
    bench_multigpu.git(repo, "commit", "-qm", "kernels")
    return repo


PROGRESS = re.compile(r"\s(\d+(?:\.\d+)?)s\s+\(elapsed (\d+(?:\.\d+)?)s\)")


@dataclass
class Run:
    name: str
    gpus: int
    wall: float = 0.0
    rc: int = -1
    jobs: list[tuple[float, float]] = field(default_factory=list)  # (start, end) from the gate's start
    util: dict[str, float] = field(default_factory=dict)
    host: float = float("nan")  # the host's CPUs busy, mean over the run (%)
    verdict: str = ""

    def longest(self) -> float:
        return max((e - s for s, e in self.jobs), default=0.0)

    def first_start(self) -> float:
        return min((s for s, _ in self.jobs), default=0.0)

    def tail(self) -> float:
        """From the last moment the most jobs ran at once to the last job's end."""
        if not self.jobs:
            return 0.0
        events = sorted([(s, 1) for s, _ in self.jobs] + [(e, -1) for _, e in self.jobs])
        running, peak, last_peak = 0, 0, 0.0
        for t, d in events:
            running += d
            if running >= peak and d == 1:
                peak, last_peak = running, t
        return max(e for _, e in self.jobs) - last_peak


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all the host's CPUs, from /proc/stat."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


class Sampler:
    """nvidia-smi's utilisation of every GPU, every 0.5 s, while a run lasts; and the host's CPUs,
    busy over the whole run (a waiting worker that spins on its GPU counts as busy)."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}
        self.host = float("nan")
        self._cpu0 = _cpu_times()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        end = _cpu_times()
        if self._cpu0 is not None and end is not None and end[1] > self._cpu0[1]:
            self.host = 100.0 * (end[0] - self._cpu0[0]) / (end[1] - self._cpu0[1])

    def _loop(self) -> None:
        while not self._stop.is_set():
            p = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True)
            for line in p.stdout.splitlines():
                idx, _, util = line.partition(",")
                try:
                    self.samples.setdefault(idx.strip(), []).append(float(util))
                except ValueError:
                    pass
            self._stop.wait(0.5)

    def means(self) -> dict[str, float]:
        return {gpu: statistics.mean(v) for gpu, v in sorted(self.samples.items()) if v}


def gate(repo: Path, gpus: str, out: Path, args: list[str]) -> tuple[float, int, list[tuple[float, float]], str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus}
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", *args, "--out", str(out)],
                       cwd=repo, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (out.parent / f"{out.name}.log").write_text(p.stdout + p.stderr)
    jobs = []
    for line in p.stdout.splitlines():
        m = PROGRESS.search(line)
        if m and line.lstrip().startswith("["):
            dur, end = float(m.group(1)), float(m.group(2))
            if end > 0:
                jobs.append((end - dur, end))
    verdict = next((ln.strip() for ln in reversed(p.stdout.splitlines()) if "verdict" in ln.lower()), "")
    return wall, p.returncode, jobs, verdict or (p.stdout + p.stderr).strip()[-200:]


def measure(name: str, repo: Path, n: int, args: list[str], logs: Path) -> Run:
    run = Run(name, n)
    with Sampler() as s:
        run.wall, run.rc, run.jobs, run.verdict = gate(repo, ",".join(map(str, range(n))), logs / f"{name}-{n}", args)
    run.util = {g: u for g, u in s.means().items() if int(g) < n}
    run.host = s.host
    print(f"  {name} on {n} GPU(s): {run.wall:.1f}s exit {run.rc}, {len(run.jobs)} jobs  {run.verdict}", flush=True)
    return run


def together(repos: list[Path], placement: list[str], logs: Path, tag: str) -> list[tuple[float, int, str]]:
    results: list[tuple[float, int, str]] = [(0.0, -1, "")] * len(repos)

    def one(i: int) -> None:
        wall, rc, _, verdict = gate(repos[i], placement[i], logs / f"{tag}-{i}", ["--base", "main"])
        results[i] = (wall, rc, verdict)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(repos))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="", help="GPU counts to run on (default: 1, 2, 4 ... up to what is visible)")
    ap.add_argument("--jobs", type=int, default=64)
    ap.add_argument("--matmuls", type=int, default=500,
                    help="4096x4096 float32 matmuls per job (about 1.2 s of an H200 alone), split over its cases")
    ap.add_argument("--cases", type=int, default=3)
    ap.add_argument("--library", type=Path, help="a library checkout to run `check --all` on")
    ap.add_argument("--gates", type=int, default=3, help="gates at once (0: skip)")
    ap.add_argument("--gate-jobs", type=int, default=16, help="jobs in each of the gates run at once")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: plan, library, gates")
    ap.add_argument("--logs", type=Path, help="where the gates' logs go (default: a temporary directory)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed: nothing to measure")
        return 0
    visible = torch.cuda.device_count()
    if visible == 0:
        print("no GPU on this machine: the scaling benchmark needs one or more NVIDIA GPUs")
        return 0
    counts = [int(c) for c in args.gpus.split(",") if c] or [c for c in (1, 2, 4, 8) if c <= visible]
    counts = [c for c in counts if c <= visible]
    skip = set(args.skip.split(","))
    root = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    logs = args.logs or root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    gate_rows: list[str] = []
    try:
        if "plan" not in skip:
            print(f"synthetic plan: {args.jobs} jobs, {args.matmuls} matmuls each", flush=True)
            plan = build(root / "plan", args.jobs, args.matmuls, args.cases)
            runs += [measure("plan", plan, n, ["--base", "main"], logs) for n in counts]
        if args.library and "library" not in skip:
            print(f"check --all of {args.library.name}", flush=True)
            runs += [measure("library", args.library, n, ["--all"], logs) for n in counts]
        if args.gates and "gates" not in skip:
            print(f"{args.gates} gates at once, {args.gate_jobs} jobs each", flush=True)
            repos = []
            for i in range(args.gates):
                repos.append(build(root / f"g{i}", args.gate_jobs, args.matmuls, args.cases))
            alone = measure("gate-alone", repos[0], 1, ["--base", "main"], logs)
            placements = {"one per GPU": [str(i % visible) for i in range(args.gates)],
                          "all on GPU 0": ["0"] * args.gates}
            gate_rows.append(f"{'alone (GPU 0)':<16} {alone.wall:8.1f} {'':>8} exit {alone.rc}")
            for label, placement in placements.items():
                res = together(repos, placement, logs, label.replace(" ", "-"))
                for i, (wall, rc, verdict) in enumerate(res):
                    gate_rows.append(f"{label:<16} gate {i} on GPU {placement[i]}: {wall:8.1f}s "
                                     f"{wall / alone.wall if alone.wall else float('nan'):5.2f}x alone, exit {rc}  "
                                     f"{verdict[:80]}")
    finally:
        if not args.logs:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(f"{'run':<9} {'GPUs':>4} {'jobs':>5} {'wall s':>7} {'speed-up':>8} {'start s':>7} {'longest s':>9} "
          f"{'tail s':>6} {'exit':>4} {'host':>5}  mean utilisation per GPU")
    for r in runs:
        one = next((x.wall for x in runs if x.name == r.name and x.gpus == 1), None)
        speed = f"{one / r.wall:.2f}x" if one and r.wall else "-"
        util = " ".join(f"{g}:{u:.0f}%" for g, u in r.util.items())
        print(f"{r.name:<9} {r.gpus:>4} {len(r.jobs):>5} {r.wall:>7.1f} {speed:>8} {r.first_start():>7.1f} "
              f"{r.longest():>9.1f} {r.tail():>6.1f} {r.rc:>4} {r.host:>4.0f}%  {util}")
    if gate_rows:
        print()
        print("gates at once (exit 0 = green, 1 = red; none should be 2 or hit a limit)")
        for row in gate_rows:
            print("  " + row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
