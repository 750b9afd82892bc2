"""The full default gate on one changed real Triton kernel, timed end to end.

    python bench/bench_gate.py --liger PATH [--kernel geglu|layer_norm ...] [--commit SHA]
                               [--change comment|mask] [--gate-path DIR ...] [--repeats N]

A scratch Liger-Kernel repository gets a forward+backward spec of one of its kernels at a base
commit: GEGLU (``LigerGELUMulFunction``, ``ops/geglu.py``) or the layer norm
(``LigerLayerNormFunction``, ``ops/layer_norm.py``, the spec of ``bench/liger_specs``); the head
changes the kernel's file: a token that computes nothing (the kernel is the same, so whatever fails
is the base's debt), or, for GEGLU, ``mask``: the forward leaving the last column of rows longer
than 1024 unwritten (a bug the change brings). Beside each gate, the KernelBench-style check of the
same spec (``kernelbench_style.py``: one shape, randn, allclose) is timed in a fresh process, the
baseline the gate's time is measured against. ``gpu-gate check --base --head`` then runs the
default policy, every check, with no cache. Each ``--gate-path`` is a gpu-gate source tree to time
(default: this one), one after the other on the same machine, so that two versions compare in one
run. Prints the wall time, the per-job durations from results.json and the equivalence job's cases
per second.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_selection import git  # noqa: E402

# The base the benchmark gates by default: Liger-Kernel's main on 2026-08-21 (geglu.py unchanged since
# 91ae44a). A fixed commit, so that timings of different sessions gate the same code.
LIGER_COMMIT = "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c"

POLICY = """\
version: 1
kernels: {exclude: ["src/liger_kernel/ops/backends/_ascend/**", "test/**", "benchmark/**"]}
specs: ["gate/**/*_gate.py"]
python_path: [src]
"""

GEGLU = """\
import torch
import gpu_gate as gg
from liger_kernel.ops import LigerGELUMulFunction


@gg.spec(
    dims={"rows": gg.Dim(1, 4096), "hidden": gg.Dim(1, 11008)},
    inputs={"a": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16"]),
            "b": gg.Tensor(("rows", "hidden"), dtype="like:a")},
    reference=lambda a, b: torch.nn.functional.gelu(a, approximate="tanh") * b,
    grads=["a", "b"],
)
def geglu_gate(a, b):
    return LigerGELUMulFunction.apply(a.contiguous(), b.contiguous())
"""


# kernel: (its file, the spec's path in the scratch repository, the spec's text)
KERNELS = {
    "geglu": ("src/liger_kernel/ops/geglu.py", "gate/geglu_gate.py", GEGLU),
    "layer_norm": ("src/liger_kernel/ops/layer_norm.py", "gate/layer_norm_gate.py",
                   (Path(__file__).resolve().parent / "liger_specs" / "layer_norm_gate.py").read_text()),
}

CHANGES = {
    "comment": lambda source: source + "_REVIEWED = True  # a token: a comment alone is no change\n",
    # the first mask of the file (the forward kernel's), one element short for rows longer than 1024
    "mask": lambda source: source.replace("< n_cols\n", "< n_cols - (n_cols > 1024)\n", 1),
}


def scratch(liger: Path, commit: str, where: Path, change: str = "comment", policy: str = POLICY,
            spec: str = GEGLU, kernel: str = "src/liger_kernel/ops/geglu.py",
            spec_path: str = "gate/geglu_gate.py") -> tuple[Path, str, str]:
    """Base: ``commit`` plus the policy and the spec; head: the base with ``change`` made to ``kernel``."""
    repo = where / "liger"
    # The scratch borrows the clone's objects (no copy, and a shallow clone that lacks a blob outside
    # the package, as slim clones of large repositories do, still serves the commits it has).
    objects = Path(git(liger, "rev-parse", "--path-format=absolute", "--git-common-dir")) / "objects"
    git(where, "init", "-q", str(repo))
    (repo / ".git" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    if (objects.parent / "shallow").exists():
        shutil.copy(objects.parent / "shallow", repo / ".git" / "shallow")
    env = {**os.environ, "GIT_INDEX_FILE": str(where / "index")}

    def run(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=repo, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    def blob(text: str) -> str:
        tmp = where / "blob"
        tmp.write_text(text)
        return git(repo, "hash-object", "-w", str(tmp))

    run("read-tree", commit)
    # what the clone lacks (a slim clone's tests and data, a damaged mirror's large files) is left out
    staged = [line.split(None, 3) for line in run("ls-files", "-s").splitlines()]
    checked = subprocess.run(["git", "cat-file", "--batch-check"], cwd=repo, env=env, check=True, capture_output=True,
                             text=True, input="".join(f"{e[1]}\n" for e in staged)).stdout.splitlines()
    missing = [e[3] for e, said in zip(staged, checked) if said.endswith(" missing")]
    for start in range(0, len(missing), 500):
        run("rm", "--cached", "-q", "--ignore-unmatch", "--", *missing[start:start + 500])
    for rel, text in {".gpu-gate.yml": policy, spec_path: spec}.items():
        run("update-index", "--add", "--cacheinfo", f"100644,{blob(text)},{rel}")
    base = git(repo, "commit-tree", run("write-tree"), "-p", commit, "-m", "gate spec")
    source = git(repo, "show", f"{commit}:{kernel}")
    source += "\n"  # git() strips the last newline
    changed = CHANGES[change](source)
    if changed == source:
        raise SystemExit(f"--change {change}: the kernel at {commit} does not have the code this change edits")
    run("update-index", "--cacheinfo", f"100644,{blob(changed)},{kernel}")
    head = git(repo, "commit-tree", run("write-tree"), "-p", base, "-m", f"{Path(kernel).stem}: {change}")
    git(repo, "update-ref", "refs/heads/main", base)
    git(repo, "update-ref", "refs/heads/change", head)
    git(repo, "symbolic-ref", "HEAD", "refs/heads/change")
    git(repo, "read-tree", "--reset", "-u", "HEAD")
    return repo, base, head


def another_change(repo: Path, head: str, kernel: str = "src/liger_kernel/ops/geglu.py",
                   comment: str = "_REVIEWED_AGAIN = True  # a token: a comment alone is no change") -> str:
    """A new head on top of ``head`` that changes the kernel file again (``comment``: a line that adds
    a token and computes nothing): the result cache misses, what was compiled for the unchanged
    kernels still applies."""
    path = repo / kernel
    git(repo, "checkout", "-q", head)
    path.write_text(path.read_text() + comment + "\n")
    # fixed dates: the same commit (so the same seed, so the same cases) for every tree timed
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "user.name=bench", "-c", "user.email=bench@localhost",
                    "commit", "-q", "-am", "again"],
                   cwd=repo, env=env, check=True, capture_output=True)
    return git(repo, "rev-parse", "HEAD")


def _run_timed(argv: list[str], cwd: Path, env: dict[str, str], t0: float
               ) -> tuple[subprocess.CompletedProcess[str], list[tuple[float, str]]]:
    """Run the gate, and note when each line of what it prints arrived (seconds since ``t0``): the
    time before the first job, between the jobs and after the last, seen from outside."""
    timeline: list[tuple[float, str]] = []
    lines: list[str] = []
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.strip() and not line.startswith((" ", "\t")):
                timeline.append((round(time.perf_counter() - t0, 2), line.strip()[:100]))
        rc = proc.wait()
    text = "".join(lines)
    return subprocess.CompletedProcess(argv, rc, text, ""), timeline


def one_gate(repo: Path, base: str, head: str, gate_path: Path, cache: Path | None = None,
             keep: Path | None = None) -> dict[str, object]:
    """One gate; with ``cache``, that result cache (read and written), else none; ``keep``: a
    directory where its results.json is copied (numbered, one per gate)."""
    out = repo / ".gpu-gate" / "out"
    # the tree timed first, then whatever the caller's path holds (the dependencies' installs)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(gate_path), os.environ.get("PYTHONPATH")]))}
    caching = ["--cache-dir", str(cache)] if cache else ["--no-cache"]
    t = time.perf_counter()
    p, timeline = _run_timed([sys.executable, "-m", "gpu_gate.cli", "check", "--base", base, "--head", head, *caching],
                             repo, env, t)
    wall = time.perf_counter() - t
    if keep is not None and (out / "results.json").is_file():
        keep.mkdir(parents=True, exist_ok=True)
        n = len(list(keep.glob("results-*.json")))
        (keep / f"results-{n}.json").write_bytes((out / "results.json").read_bytes())
    try:
        results = json.loads((out / "results.json").read_text())["results"]
    except (OSError, ValueError, KeyError):
        print(p.stdout[-3000:], p.stderr[-3000:], sep="\n")
        results = []
    jobs = {r["check"]: (round(r.get("duration_s") or 0.0, 1), r["status"], r.get("cases") or 0) for r in results}
    changes: dict[str, list[str]] = {}
    for r in results:
        for f in r.get("findings") or []:
            change = (f.get("details") or {}).get("change")
            if f.get("severity") == "error" or change:
                print(f"  {r['check']}: {f['kind']}{f' ({change})' if change else ''}: {f['message'][:300]}",
                      file=sys.stderr)
            if change:
                changes.setdefault(change, []).append(f"{r['check']}:{f['kind']}")
            if f.get("kind") == "differential":
                print(f"  {r['check']}: {f['message'][:300]}", file=sys.stderr)
    eq = jobs.get("equivalence")
    timing = next(((r.get("extra") or {}).get("timing") for r in results if r["check"] == "equivalence"), None)
    # the determinism job's: its load, and each case's repeats on the head's and the base's code
    det = next(((r.get("extra") or {}).get("timing") for r in results if r["check"] == "determinism"), None)
    # what the equivalence job ran: the number of cases, each dim's range, the dtypes (a faster gate
    # must not have bought its time with fewer or smaller cases)
    coverage = next(((r.get("extra") or {}).get("coverage") for r in results if r["check"] == "equivalence"), None)
    ran = None
    if isinstance(coverage, dict):
        ran = {"cases": coverage.get("cases"),
               "dims": {d: [v.get("min"), v.get("max"), v.get("distinct")] for d, v in (coverage.get("dims") or {}).items()},
               "dtypes": {name: v.get("dtype") for name, v in (coverage.get("inputs") or {}).items() if "dtype" in v}}
    return {"wall_s": round(wall, 1), "exit": p.returncode, "jobs": jobs, "changes": changes,
            "timeline": timeline, "equivalence_timing": timing, "determinism_timing": det, "equivalence_ran": ran,
            "equivalence_cases_per_s": round(eq[2] / eq[0], 2) if eq and eq[0] else None}


def time_gates(repo: Path, base: str, head: str, paths: list[Path], tmp: Path, repeats: int, cached_rerun: bool,
               warm_head: Callable[[], str] | None = None, keep: Path | None = None,
               tag: dict[str, object] | None = None) -> None:
    """Time the gate of each source tree in ``paths`` on ``base..head``, ``repeats`` times, and print
    one JSON line per tree. ``cached_rerun``: each timed gate writes a fresh result cache and runs
    again on it (``cached_rerun_s``); ``warm_head``: then a new head from it is gated on the same
    cache (``warm_rerun``), and the work tree goes back to ``head``."""
    for k, path in enumerate(paths):
        runs = []
        for i in range(repeats):
            cache = tmp / f"cache-{k}-{i}" if cached_rerun else None
            run = one_gate(repo, base, head, path.resolve(), cache, keep)
            if cache is not None:
                again = one_gate(repo, base, head, path.resolve(), cache)
                run["cached_rerun_s"], run["cached_rerun_exit"] = again["wall_s"], again["exit"]
                if warm_head is not None:
                    warm = one_gate(repo, base, warm_head(), path.resolve(), cache, keep)
                    git(repo, "checkout", "-q", head)
                    run["warm_rerun"] = {key: warm[key] for key in ("wall_s", "exit", "jobs", "equivalence_timing",
                                                                    "determinism_timing", "timeline")}
            runs.append(run)
        walls = [float(r["wall_s"]) for r in runs]  # type: ignore[arg-type]
        for r in runs:  # the first run's timeline, readable: where the time outside the jobs went
            for at, line in r["timeline"][:40]:  # type: ignore[index]
                print(f"  {at:7.2f}s  {line}", file=sys.stderr)
            break
        print(json.dumps({**(tag or {}), "gate": str(path), "median_wall_s": statistics.median(walls), "runs": runs}))


def kernelbench_style(repo: Path, spec_path: str, gate_path: Path) -> dict[str, object]:
    """The KernelBench-style check of the same spec, timed as a fresh process (the import of torch
    and the library, the kernels' compiles, five seeds of one shape, allclose): its verdict and wall."""
    script = Path(__file__).resolve().parent / "kernelbench_style.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(gate_path.resolve()), str(repo / "src"),
                                                                      os.environ.get("PYTHONPATH")]))}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, str(script), str(repo), spec_path], cwd=repo, env=env, capture_output=True,
                       text=True)
    wall = round(time.perf_counter() - t, 1)
    try:
        said = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"wall_s": wall, "error": (p.stderr or p.stdout)[-500:]}
    return {"wall_s": wall, "passed": said.get("passed"), "dims": said.get("dims"), "device": said.get("device")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--liger", type=Path, required=True,
                    help="a Liger-Kernel clone (work tree or bare; bench/slim_clone.py makes a 5 MiB one of the commit)")
    ap.add_argument("--kernel", action="append", choices=sorted(KERNELS),
                    help="the kernel to gate (repeatable; default: geglu and layer_norm)")
    ap.add_argument("--commit", default=LIGER_COMMIT, help=f"the base commit (default: {LIGER_COMMIT[:12]}, Liger-Kernel main on 2026-08-21)")
    ap.add_argument("--gate-path", type=Path, action="append", help="a gpu-gate source tree to time (repeatable)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--change", choices=sorted(CHANGES), default="comment", help="what the head changes in geglu.py")
    ap.add_argument("--declare-inplace", action="store_true",
                    help="the spec declares the backward's in-place writes: mutates={a: grad:a, b: grad:b}")
    ap.add_argument("--jobs-per-gpu", type=int, default=None, help="the policy's runner.jobs_per_gpu (default: its default)")
    ap.add_argument("--warm-rerun", action="store_true",
                    help="with --cached-rerun: then a new head that changes the kernel file again, gated with the "
                         "same cache (the results miss, the kernels the base compiled are kept): warm_rerun_s")
    ap.add_argument("--cached-rerun", action="store_true",
                    help="each timed gate writes a fresh result cache, and the same gate runs again on it (nothing "
                         "changed): its wall time is cached_rerun_s")
    ap.add_argument("--keep-results", type=Path, default=None,
                    help="copy each timed gate's results.json here (results-N.json)")
    args = ap.parse_args()
    paths = args.gate_path or [Path(__file__).resolve().parents[1]]
    for name in args.kernel or ["geglu", "layer_norm"]:
        kernel, spec_path, spec = KERNELS[name]
        if args.change != "comment" and name != "geglu":
            raise SystemExit(f"--change {args.change} edits geglu.py only; run it with --kernel geglu")
        with tempfile.TemporaryDirectory() as tmp:
            policy = POLICY + (f"runner: {{jobs_per_gpu: {args.jobs_per_gpu}}}\n" if args.jobs_per_gpu else "")
            if args.declare_inplace and name == "geglu":
                spec = spec.replace('grads=["a", "b"],', 'grads=["a", "b"],\n    mutates={"a": "grad:a", "b": "grad:b"},')
            repo, base, head = scratch(args.liger.resolve(), args.commit, Path(tmp), args.change, policy, spec,
                                       kernel, spec_path)
            beside = kernelbench_style(repo, spec_path, paths[0])
            print(json.dumps({"kernel": name, "kernelbench_style": beside}))
            warm = (lambda: another_change(repo, head, kernel)) if args.warm_rerun else None
            time_gates(repo, base, head, paths, Path(tmp), args.repeats, args.cached_rerun, warm, args.keep_results,
                       {"kernel": name, "kernelbench_style_s": beside.get("wall_s")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
