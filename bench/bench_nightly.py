"""A nightly run on real libraries: ``gpu-gate check --all`` at each library's current commit, and a triage table.

    python bench/bench_nightly.py --repo liger=PATH[@COMMIT] [--repo fla=PATH ...] [--sanitizers]
                                  [--spec GLOB ...] [--gate-path DIR] [--keep DIR] [--cpu]

Each PATH is a clone (bare or not) of one of the libraries ``bench_real_bugs.py`` knows (Liger-Kernel,
flash-linear-attention, mamba, LightLLM, flash-attention, unsloth); COMMIT defaults to the clone's only
``refs/slim/*`` commit (a ``bench/slim_clone.py`` clone) or else its HEAD. For each library a scratch
repository gets the library's sources at that commit (as ``bench_real_bugs.py`` takes them: the package,
its top-level ``__init__`` emptied where it imports what the GPU machine lacks, stand-ins for the same
absent dependencies), every spec the project has written for that library (``bench/real_bugs/`` and, for
Liger-Kernel, ``bench/liger_specs/``: the specs a careful user writes, none shaped to a known bug) and the
library's benchmark policy. That policy is the default checks without the compute-sanitizer jobs;
``--sanitizers`` puts those back at their defaults.

The gate runs once per library, ``check --all``: the nightly a maintainer runs on the default branch,
with no base to compare with, so every finding is judged by the absolute rules. One line per spec
follows (its jobs' statuses, the error findings and the first line of what each said) and one JSON
line per library; a Markdown table (library, spec, verdict, findings) ends the output. Triage of a red
is the reader's: a gate artefact is fixed in gpu-gate, a library defect gets a standalone repro.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_real_bugs import BUGS, HERE, LIBRARIES, git, populate  # noqa: E402

LIGER_SPECS = Path(__file__).resolve().parent / "liger_specs"
SANITIZERS = ("memcheck", "racecheck", "synccheck", "initcheck")


def specs_of(library: str) -> list[Path]:
    """Every spec written for ``library``: the real-bug corpus's, and Liger's main ops."""
    names = sorted({s for b in BUGS.values() if b["library"] == library for s in [b["spec"], *b.get("also", [])]})
    found = [HERE / n for n in names]
    if library == "liger":
        found += sorted(LIGER_SPECS.glob("*_gate.py"))
    return found


def commit_of(clone: Path, given: str | None) -> str:
    if given:
        return git(clone, "--git-dir", str(clone), "rev-parse", f"{given}^{{commit}}")
    slim = git(clone, "--git-dir", str(clone), "for-each-ref", "--format=%(objectname)", "refs/slim").split()
    if len(slim) == 1:
        return slim[0]
    try:
        return git(clone, "--git-dir", str(clone), "rev-parse", "--verify", "HEAD^{commit}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"{clone}: HEAD names no commit and the clone holds {len(slim)} slim commits: "
                         "give the one to run as --repo LIBRARY=PATH@COMMIT") from None


def policy_for(library: str, sanitizers: bool, cpu: bool) -> str:
    text = (HERE / LIBRARIES[library]["policy"]).read_text()
    if sanitizers:  # the compute-sanitizer jobs at their defaults: the lines that turn them off go
        text = "\n".join(line for line in text.splitlines()
                         if not any(line.strip().startswith(f"{s}:") for s in SANITIZERS)) + "\n"
    if cpu:  # a dry run: the checks that need a GPU are "not run", which must not hide red from green
        text += "not_run: warn\n"
    return text


def build(clone: Path, library: str, commit: str, where: Path, sanitizers: bool, cpu: bool) -> Path:
    repo = where / "repo"
    repo.mkdir(parents=True)
    populate(clone, library, commit, repo)
    (repo / "gate").mkdir(exist_ok=True)
    for spec in specs_of(library):
        shutil.copy(spec, repo / "gate" / spec.name)
    (repo / ".gpu-gate.yml").write_text(policy_for(library, sanitizers, cpu))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{library} at {commit[:12]}, gpu-gate specs and a policy")
    return repo


def by_spec(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per spec: its jobs' statuses and the error findings (check, kind, first line of the message)."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"jobs": {}, "errors": [], "warnings": 0})
    for r in results.get("results", []):
        spec = (r.get("spec") or "(no spec)").split("::")[0].rsplit("/", 1)[-1]
        row = out[spec]
        row["jobs"][r["check"]] = [r["status"], round(r.get("duration_s") or 0.0, 1), r.get("cases") or 0]
        if r["status"] in ("error", "not_run") and r.get("reason"):
            row["errors"].append(f"{r['check']}/{r['status']}: {r['reason'].splitlines()[0][:200]}")
        for f in r["findings"]:
            if f["severity"] == "error":
                case = f" [{f['case']}]" if f.get("case") else ""
                row["errors"].append(f"{f['check']}/{f['kind']}{case}: {f['message'].splitlines()[0][:240]}")
            elif f["severity"] == "warning":
                row["warnings"] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", action="append", default=[], required=True, help="LIBRARY=PATH[@COMMIT]")
    ap.add_argument("--spec", action="append", default=[], help="only these specs (gpu-gate check --spec)")
    ap.add_argument("--sanitizers", action="store_true", help="run the compute-sanitizer checks too (defaults)")
    ap.add_argument("--gate-path", default=str(Path(__file__).resolve().parent.parent), help="gpu-gate source tree")
    ap.add_argument("--keep", help="keep the scratch repositories and reports here")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (Triton's interpreter): a dry run of the flow")
    ap.add_argument("--timeout", type=float, default=3000.0, help="seconds for one library's gate")
    args = ap.parse_args()
    root = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="nightly-"))
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(args.gate_path).resolve()),
                                                       os.environ.get("PYTHONPATH")]))}
    table = []
    for given in args.repo:
        library, _, where_at = given.partition("=")
        path, _, at = where_at.partition("@")
        if library not in LIBRARIES:
            raise SystemExit(f"--repo {given}: unknown library {library!r} (one of {', '.join(LIBRARIES)})")
        clone = Path(path).resolve()
        commit = commit_of(clone, at or None)
        repo = build(clone, library, commit, root / library, args.sanitizers, args.cpu)
        out = root / library / "out"
        cmd = [sys.executable, "-m", "gpu_gate.cli", "check", "--all", "--no-cache", "--out", str(out),
               *(["--cpu"] if args.cpu else []), *(a for s in args.spec for a in ("--spec", s))]
        start = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=args.timeout)
            code, log = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as exc:
            code, log = -1, f"timed out after {args.timeout:.0f} s\n{exc.stdout or ''}{exc.stderr or ''}"
        wall = round(time.monotonic() - start, 1)
        (root / library / "gate.log").write_text(log)
        results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
        specs = by_spec(results)
        for spec, row in sorted(specs.items()):
            verdict = "red" if row["errors"] else "green"
            jobs = ", ".join(f"{c} {s} {d}s/{n}" for c, (s, d, n) in sorted(row["jobs"].items()))
            print(f"{library} {spec}: {verdict} ({jobs})", flush=True)
            for e in row["errors"]:
                print(f"    {e}", flush=True)
            table.append(f"| {library} | {spec} | {verdict} | "
                         f"{'<br>'.join(e.replace('|', '/') for e in row['errors'][:6]) or '-'} |")
        print(json.dumps({"library": library, "commit": commit, "exit": code, "wall_s": wall,
                          "specs": {k: {"jobs": v["jobs"], "errors": v["errors"]} for k, v in specs.items()},
                          "tail": log[-1500:] if code not in (0, 1) else ""}), flush=True)
        if not specs:
            table.append(f"| {library} | - | no results (exit {code}) | {log.strip().splitlines()[-1][:200] if log.strip() else '-'} |")
    print("\n| library | spec | verdict | error findings |\n|---|---|---|---|")
    print("\n".join(table))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
