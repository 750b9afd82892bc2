"""Red on an honest change: how often the gate blocks a pull request that changes nothing the
kernels compute, alone and at two gates per GPU, and how often the sanitizer jobs' tool failed.

    python bench/bench_red_noise.py --repo liger=PATH [--repo fla=PATH ...] [--bug L8 ...] [--quick]
                                    [--times 2] [--tool-launch plain|args-pipe|filter|blocking,...]

For each bug of ``bench/bench_real_bugs.py`` (repositories given as there, ``--repo NAME=PATH``), the
scratch repository's fix commit F gets one more commit N that changes a token of each kernel file
the fix touched without changing what it computes (an unused module-level name, or a comment-free
``#define`` in CUDA): a change the gate must judge (a comment alone is no change), and one that
cannot be wrong. The pull request F..N is gated ``--times`` times alone, then ``--times`` times as
two gates at once on one GPU (two clones, ``CUDA_VISIBLE_DEVICES`` the same). Each run prints one
JSON line; a table ends the output: per run, the verdict, the findings that made it red, and the
sanitizer jobs run, run again (``retried``) and lost to the tool (``infrastructure``, a crash with
no report or a sandbox that never started). Target: 0 red, 0 infrastructure.

``--quick`` runs one bug (L8, Liger's RoPE: the cheapest spec), one run alone and one pair, and
stops starting new gates after ``--budget-s`` (default 270 s with --quick), saying so: about five
minutes on one H200.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_bugs import BUGS, git, scratch  # noqa: E402

SANITIZERS = {"memcheck", "racecheck", "synccheck", "initcheck"}
TOOL_FAILURES = {"infrastructure", "sanitizer-crash", "sandbox-stuck"}
QUICK_BUGS = ["L8"]


def default_checks(repo: Path, base: str) -> str:
    """A commit on ``base`` whose policy runs the default checks (the benchmark's policies turn the
    sanitizers and the compile check off): the base of a measure of the sanitizer jobs. Its sha."""
    git(repo, "checkout", "-q", base)
    policy = repo / ".gpu-gate.yml"
    off = tuple(f"{check}: off" for check in (*sorted(SANITIZERS), "compile"))
    text = "".join(line for line in policy.read_text().splitlines(keepends=True) if line.strip() not in off)
    policy.write_text(text.replace("\nchecks:\n", "\n") if text.endswith("\nchecks:\n") else text)
    git(repo, "commit", "-q", "-am", "the default checks")
    return git(repo, "rev-parse", "HEAD")


def honest_change(repo: Path, base: str, fix: str | None = None) -> str:
    """Commit N on ``base``: a token added to each kernel file the fix touched that computes
    nothing (an unused module-level name in Python, an unused macro in CUDA). Its sha."""
    git(repo, "checkout", "-q", base)
    fix = fix or base
    touched = [p for p in git(repo, "diff", "--name-only", f"{fix}~1", fix).splitlines()
               if not p.startswith("gate/") and p.endswith((".py", ".cu", ".cuh"))]
    if not touched:
        raise SystemExit(f"the fix at {base[:12]} touches no kernel file")
    for rel in touched:
        path = repo / rel
        line = "\n#define GPU_GATE_BENCH_UNUSED 1\n" if rel.endswith((".cu", ".cuh")) else "\n_bench_unused = 1\n"
        path.write_text(path.read_text() + line)
    git(repo, "checkout", "-q", "-b", "honest")
    git(repo, "commit", "-q", "-am", "an honest change: an unused name in each kernel file the fix touched")
    return git(repo, "rev-parse", "HEAD")


def gate(gate_path: Path, repo: Path, base: str, head: str, out: Path, env_extra: dict[str, str]) -> dict[str, object]:
    """One ``gpu-gate check --base --head``; what made it red and what its sanitizer jobs met."""
    git(repo, "checkout", "-q", head)
    env = {**os.environ, **env_extra,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(gate_path), os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--base", base, "--head", head, "--no-cache",
                        "--out", str(out)], cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    results = json.loads((out / "results.json").read_text()).get("results", []) if (out / "results.json").exists() else []
    san = [r for r in results if r["check"] in SANITIZERS]
    red = sorted({f"{f['check']}/{f['kind']}: {f['message'].splitlines()[0][:160]}"
                  for r in results for f in r["findings"] if f["severity"] == "error"}
                 | {f"{r['check']}: {r['status']} ({(r.get('reason') or '')[:160]})"
                    for r in results if r["status"] in ("error", "not_run") and r.get("level") == "required"})
    return {"exit": p.returncode, "wall_s": round(time.monotonic() - start, 1), "red": red,
            "sanitizer_jobs": len(san),
            "retried": sum(any(f["kind"] == "retried" for f in r["findings"]) for r in san),
            "infrastructure": sum(any(f["kind"] in TOOL_FAILURES for f in r["findings"])
                                  and r["status"] in ("error", "not_run") for r in san),
            "tail": (p.stdout + p.stderr)[-800:] if p.returncode not in (0, 1) else ""}


def together(gate_path: Path, repos: list[Path], base: str, head: str, out: Path, env: dict[str, str]
             ) -> list[dict[str, object]]:
    """One gate per repository, all at once on one GPU, each on its own clone."""
    found: list[dict[str, object]] = [{} for _ in repos]

    def one(i: int) -> None:
        found[i] = gate(gate_path, repos[i], base, head, out / f"g{i}", env)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(repos))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", action="append", default=[], help="LIBRARY=PATH of a clone with the bugs' commits")
    ap.add_argument("--bug", action="append", help="bug ids (default: every bug whose library is given)")
    ap.add_argument("--times", type=int, default=2, help="runs alone, and pairs at two gates per GPU (default 2)")
    ap.add_argument("--alone", type=int, default=None,
                    help="runs alone (default: --times); 0 with --times N: N pairs only, the two-gates-per-GPU measure")
    ap.add_argument("--quick", action="store_true", help="one bug (L8), one run alone and one pair, within --budget-s")
    ap.add_argument("--budget-s", type=float, help="start no gate after this many seconds (default: 270 with --quick)")
    ap.add_argument("--per-gpu", type=int, default=2, help="gates at once on the one GPU in each shared run (default 2)")
    ap.add_argument("--gpu", default="0", help="the GPU both gates of a pair share (CUDA_VISIBLE_DEVICES)")
    ap.add_argument("--tool-launch", default=None, help="GPU_GATE_TOOL_LAUNCH for the gates (see "
                    "gpu_gate/executor/tool_launch.py): plain, args-pipe, filter, blocking, comma-separated")
    ap.add_argument("--default-checks", action="store_true",
                    help="run every default check, the sanitizers and the compile check too (the bugs' policies turn "
                         "them off): the measure of the sanitizer jobs' infrastructure failures")
    ap.add_argument("--gate-path", default=str(Path(__file__).resolve().parent.parent), help="gpu-gate source tree")
    ap.add_argument("--keep", help="keep the scratch repositories and reports here")
    args = ap.parse_args()
    libraries = {name: str(Path(path).resolve()) for name, path in (r.split("=", 1) for r in args.repo)}
    bugs = args.bug or (QUICK_BUGS if args.quick else [b for b, d in BUGS.items() if d["library"] in libraries])
    bugs = [b for b in bugs if BUGS[b]["library"] in libraries]
    if not bugs:
        raise SystemExit("no bug to run: give --repo LIBRARY=PATH for the bugs' library (liger for --quick)")
    times = 1 if args.quick else max(1, args.times)
    alone = times if args.alone is None or args.quick else max(0, args.alone)
    budget = args.budget_s if args.budget_s is not None else (270.0 if args.quick else float("inf"))
    env = {"CUDA_VISIBLE_DEVICES": args.gpu, **({"GPU_GATE_TOOL_LAUNCH": args.tool_launch} if args.tool_launch else {})}
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="red-noise-"))
    began = time.monotonic()
    rows: list[tuple[str, str, dict[str, object]]] = []
    skipped: list[str] = []
    for bug_id in bugs:
        where = root / bug_id
        shas = scratch(Path(libraries[BUGS[bug_id]["library"]]), BUGS[bug_id], where)
        repo = Path(shas["repo"])
        base = default_checks(repo, shas["F"]) if args.default_checks else shas["F"]
        head = honest_change(repo, base, shas["F"])
        clones = [repo]
        for k in range(1, max(1, args.per_gpu)):
            clones.append(where / f"clone{k}")
            git(where, "clone", "-q", str(repo), str(clones[-1]))
        shared = "pair" if args.per_gpu == 2 else f"{args.per_gpu} at once"
        plan = [("alone", i) for i in range(alone)] + [(shared, i) for i in range(times)]
        for how, i in plan:
            if time.monotonic() - began > budget:
                skipped.append(f"{bug_id} {how} #{i + 1}")
                continue
            out = where / f"{how}{i}"
            found = ([gate(Path(args.gate_path), repo, base, head, out, env)] if how == "alone"
                     else together(Path(args.gate_path), clones, base, head, out, env))
            for k, res in enumerate(found):
                label = f"{how} #{i + 1}" + (f" gate {k + 1}" if how != "alone" else "")
                print(json.dumps({"bug": bug_id, "run": label, **res}), flush=True)
                rows.append((bug_id, label, res))
    reds = [r for r in rows if r[2]["exit"] != 0]
    san = sum(int(r[2]["sanitizer_jobs"]) for r in rows)  # type: ignore[call-overload]
    infra = sum(int(r[2]["infrastructure"]) for r in rows)  # type: ignore[call-overload]
    retried = sum(int(r[2]["retried"]) for r in rows)  # type: ignore[call-overload]
    print(f"\ntool launch: {args.tool_launch or os.environ.get('GPU_GATE_TOOL_LAUNCH') or 'plain'}; "
          f"{len(rows)} gates in {time.monotonic() - began:.0f} s"
          + (f"; not started (budget {budget:.0f} s): {', '.join(skipped)}" if skipped else ""))
    print("| bug | run | exit | wall | sanitizer jobs | retried | infrastructure | what made it red |")
    print("|---|---|---|---|---|---|---|---|")
    for bug_id, label, res in rows:
        why = "; ".join(res["red"])[:300] if res["exit"] != 0 else "-"  # type: ignore[arg-type]
        print(f"| {bug_id} | {label} | {res['exit']} | {res['wall_s']} s | {res['sanitizer_jobs']} | {res['retried']} | "
              f"{res['infrastructure']} | {why or res['tail'][-200:]} |")  # type: ignore[index]
    print(f"| all | {len(rows)} gates | red: {len(reds)} | - | {san} | {retried} | {infra} | target: 0 red, 0 infrastructure |")
    for bug_id in bugs:  # issue 43's target: each of the gates sharing a GPU within 2x its time alone
        alone_s = [float(r[2]["wall_s"]) for r in rows if r[0] == bug_id and r[1].startswith("alone")]  # type: ignore[arg-type]
        shared_s = [float(r[2]["wall_s"]) for r in rows if r[0] == bug_id and not r[1].startswith("alone")]  # type: ignore[arg-type]
        if alone_s and shared_s:
            base_s = min(alone_s)
            print(f"{bug_id}: alone {base_s:.1f} s; {args.per_gpu} per GPU: {min(shared_s):.1f}-{max(shared_s):.1f} s, "
                  f"at most {max(shared_s) / base_s:.2f}x its time alone (target <= 2x)")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
