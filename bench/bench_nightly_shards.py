"""How many runners a nightly needs: the makespan of a ``check --all`` of N specs split into shards, simulated
from measured job times.

    python bench/bench_nightly_shards.py [--specs 200] [--runners 1-16] [--times bench/data/h200_job_times.json]
                                         [--results results.json ...] [--jobs-per-gpu 8] [--overhead-s 60]

The reusable workflow runs ``gpu-gate plan --shards N`` and one runner per shard (``check --shard I/N``);
the shards are balanced longest-first by the plan's cost estimates (``gpu_gate.plan.shard``), not by the
jobs' real durations, which nobody knows before they run. Here each of the N specs gets the default
checks' jobs (equivalence, determinism, four sanitizers) and one compile job per two specs (a kernel file
per two specs); each job's duration is drawn from the measured durations of its check (``--times``, or the
``duration_s`` of each job in ``--results`` files), scaled by a factor per spec (log-normal, sigma 0.5:
specs differ in size, and a spec's jobs are all big or all small). A runner runs its shard's jobs in the
order the plan lists them, ``--jobs-per-gpu`` at a time on its one GPU, with the jobs' measured durations
(measured with jobs sharing a GPU, so no slow-down is added), after ``--overhead-s`` of its own (checkout,
setup, the doctor). Prints, per runner count: the makespan, the speed-up and efficiency over one runner,
the largest shard against the mean, and the makespan had the shards been balanced by the real durations
(what the cost estimates lose); then the shard count to use: the smallest that comes within 10% of the
best makespan of the range.
"""
from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpu_gate.judge.checks import CHECKS  # noqa: E402
from gpu_gate.plan import shard  # noqa: E402

SPEC_CHECKS = ("equivalence", "determinism", "memcheck", "racecheck", "synccheck", "initcheck")


@dataclass(frozen=True)
class SimJob:
    id: str
    check: str
    cost: float  # the plan's estimate (what the shards are balanced by)
    seconds: float  # what it takes (drawn from the measured durations)


def measured(times: Path | None, results: list[Path]) -> dict[str, list[float]]:
    if results:
        out: dict[str, list[float]] = {}
        for path in results:
            for r in json.loads(path.read_text()).get("results", []):
                if r.get("duration_s"):
                    out.setdefault(r["check"], []).append(float(r["duration_s"]))
        return out
    path = times or Path(__file__).resolve().parent / "data" / "h200_job_times.json"
    return {k: [float(x) for x in v] for k, v in json.loads(path.read_text())["seconds"].items()}


def nightly(specs: int, times: dict[str, list[float]], seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    jobs: list[SimJob] = []
    for i in range(specs):
        size = rng.lognormvariate(0.0, 0.5)
        checks = SPEC_CHECKS + (("compile",) if i % 2 == 0 else ())
        for check in checks:
            if check not in times:
                continue
            jobs.append(SimJob(f"{check}:spec{i:04d}", check, CHECKS[check].cost_for({}),
                               rng.choice(times[check]) * size))
    return jobs


def runner_time(jobs: list[SimJob], slots: int, overhead: float) -> float:
    """One runner's wall time: its jobs in plan order, ``slots`` at once."""
    free = [0.0] * slots
    end = 0.0
    for j in sorted(jobs, key=lambda j: j.id):
        start = heapq.heappop(free)
        heapq.heappush(free, start + j.seconds)
        end = max(end, start + j.seconds)
    return overhead + end


def makespan(jobs: list[SimJob], runners: int, slots: int, overhead: float, by_real: bool) -> tuple[float, float]:
    """The slowest runner's time, and the largest shard's share over the mean (by real seconds)."""
    pool = [SimJob(j.id, j.check, j.seconds, j.seconds) for j in jobs] if by_real else jobs
    shards = [shard(pool, i, runners) for i in range(1, runners + 1)]  # type: ignore[arg-type]
    times = [runner_time(s, slots, overhead) for s in shards]  # type: ignore[arg-type]
    loads = [sum(j.seconds for j in s) for s in shards]
    mean = sum(loads) / len(loads)
    return max(times), (max(loads) / mean if mean else 1.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specs", type=int, default=200)
    ap.add_argument("--runners", default="1-16", help="a range A-B or a comma list")
    ap.add_argument("--times", type=Path, help="measured durations per check (JSON: {\"seconds\": {check: [s, ...]}})")
    ap.add_argument("--results", type=Path, action="append", default=[], help="results.json of real gates (repeatable)")
    ap.add_argument("--jobs-per-gpu", type=int, default=8)
    ap.add_argument("--overhead-s", type=float, default=60.0, help="each runner's own time before its first job")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    counts = (list(range(int(args.runners.split("-")[0]), int(args.runners.split("-")[1]) + 1))
              if "-" in args.runners else [int(x) for x in args.runners.split(",")])
    times = measured(args.times, args.results)
    jobs = nightly(args.specs, times, args.seed)
    total = sum(j.seconds for j in jobs)
    print(f"{args.specs} specs, {len(jobs)} jobs, {total / 3600:.1f} GPU-job-hours of measured job time; "
          f"{args.jobs_per_gpu} jobs per GPU, {args.overhead_s:.0f} s per runner before its first job")
    print("| runners | makespan | speed-up | efficiency | largest shard / mean | balanced by real times |")
    print("|---|---|---|---|---|---|")
    rows = []
    for n in counts:
        span, skew = makespan(jobs, n, args.jobs_per_gpu, args.overhead_s, by_real=False)
        ideal, _ = makespan(jobs, n, args.jobs_per_gpu, args.overhead_s, by_real=True)
        rows.append((n, span))
        one = rows[0][1] if rows[0][0] == 1 else None
        speed = f"{one / span:.2f}x" if one else "-"
        eff = f"{one / span / n:.0%}" if one else "-"
        print(f"| {n} | {span / 60:.1f} min | {speed} | {eff} | {skew:.2f} | {ideal / 60:.1f} min |")
    best = min(span for _, span in rows)
    pick = next(n for n, span in rows if span <= best * 1.10)
    print(f"\nshards to use: {pick} (the fewest within 10% of the best makespan, {best / 60:.1f} min, of "
          f"{counts[0]}-{counts[-1]} runners)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
