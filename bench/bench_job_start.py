"""How long a job waits between being handed to the executor and its judge starting, with many starting at once.

    python bench/bench_job_start.py [--specs 8] [--repeats 3] [--gate-path DIR ...] [--gpu]

A repository of ``--specs`` trivial specs (a scale kernel each) is checked with ``check --all`` and as many
jobs at once as specs (``--jobs``; on the CPU unless ``--gpu``), once per gpu-gate tree given (default:
this one), the trees taking turns, ``--repeats`` times. Each run prints one line: the wall time and, from
``results.json``, the median and largest ``extra.timing.outside.start_s`` of the equivalence jobs (and of
its parts where the tree records them). What the first wave of jobs pays before its judges run is what a
plan with many short jobs waits for; the GPU's own work is not in it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = """import gpu_gate as gg


@gg.spec(dims={{"n": gg.Dim(1, 4096)}}, inputs={{"x": gg.Tensor(("n",), dtypes=["float32"])}},
         reference=lambda x: x * {k})
def scale{k}_gate(x):
    return x * {k}
"""


def repo(where: Path, specs: int) -> Path:
    (where / "gate").mkdir(parents=True)
    for k in range(specs):
        (where / "gate" / f"scale{k}_gate.py").write_text(SPEC.format(k=k + 2))
    (where / ".gpu-gate.yml").write_text('version: 1\nkernels: {include: ["gate/**/*.py"]}\nspecs: ["gate/**/*_gate.py"]\n'
                                         "checks: {equivalence: {cases: 4}, determinism: off, memcheck: off, "
                                         "racecheck: off, synccheck: off, initcheck: off, compile: off}\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "specs"]):
        subprocess.run(["git", *cmd], cwd=where, env=env, check=True)
    return where


def run(tree: Path, where: Path, specs: int, gpu: bool, out: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--all", "--no-cache", "--jobs", str(specs),
                        "--out", str(out), *([] if gpu else ["--cpu"])], cwd=where, env=env, capture_output=True,
                       text=True)
    wall = time.monotonic() - start
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {"results": []}
    outs = [(r["extra"].get("timing") or {}).get("outside") or {} for r in results["results"]
            if r["check"] == "equivalence"]
    said: dict[str, object] = {"tree": str(tree), "exit": p.returncode, "wall_s": round(wall, 2), "jobs": len(outs)}
    for key in ("start_s", "disguised_s", "judge_spawn_s"):
        vals = [o[key] for o in outs if key in o]
        if vals:
            said[key] = {"median": round(statistics.median(vals), 2), "max": round(max(vals), 2)}
    return said


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--specs", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gate-path", action="append", help="gpu-gate source trees to compare (default: this one)")
    ap.add_argument("--gpu", action="store_true", help="on the GPUs (default: --cpu)")
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in (args.gate_path or [Path(__file__).resolve().parent.parent])]
    with tempfile.TemporaryDirectory(prefix="job-start-") as tmp:
        where = repo(Path(tmp) / "repo", args.specs)
        for i in range(args.repeats):
            for j, tree in enumerate(trees):
                print(json.dumps(run(tree, where, args.specs, args.gpu, Path(tmp) / f"out-{i}-{j}")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
