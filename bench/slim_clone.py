"""A small bare clone holding only some commits' trees: what a benchmark carries to a machine with no network.

    python bench/slim_clone.py SOURCE DEST COMMIT [COMMIT ...] [--path P ...]

SOURCE is a clone (bare or not) with the commits; DEST a new bare repository with each commit, its
tree and every tree and blob under it that SOURCE has (``--path`` keeps only those top-level paths:
a library's package, not its tests and data). A blob that SOURCE lacks (a partial or damaged
mirror) is left out and named. The commits' parents are not copied: DEST lists the commits in
``shallow``, so ``git log``, ``diff``, ``archive`` and ``read-tree`` work on them, and nothing walks
further back. Each commit gets a ref ``refs/slim/<sha>``.

``bench_gate.py --liger`` takes such a clone of Liger-Kernel at its fixed commit, and
``bench_real_bugs.py --repo`` one per library with the buggy and the fixing commit of each bug.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-c", "safe.directory=*", "--git-dir", str(repo), *args], input=input,
                          check=True, capture_output=True).stdout


def _listed(source: Path, *args: str) -> list[str]:
    out = []
    for line in git(source, "ls-tree", "--full-tree", *args).decode().splitlines():
        kind, obj = line.split("\t", 1)[0].split()[1:3]
        if kind in ("tree", "blob"):  # a submodule's commit is not here to copy
            out.append(obj)
    return out


def objects_of(source: Path, commit: str, paths: list[str]) -> list[str]:
    """The commit, every tree of it (small, and ``git archive`` reads them all whatever paths it is
    given) and every blob under ``paths`` (all when empty)."""
    sha = git(source, "rev-parse", f"{commit}^{{commit}}").decode().strip()
    root = git(source, "rev-parse", f"{sha}^{{tree}}").decode().strip()
    return [sha, root, *_listed(source, "-r", "-d", sha), *_listed(source, "-r", sha, "--", *paths)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("commits", nargs="+")
    ap.add_argument("--path", action="append", default=[], help="a top-level path to keep (repeatable; default: all)")
    args = ap.parse_args()
    source = Path(subprocess.run(["git", "-c", "safe.directory=*", "-C", str(args.source), "rev-parse",
                                  "--absolute-git-dir"], check=True, capture_output=True, text=True).stdout.strip())
    if args.dest.exists():
        raise SystemExit(f"{args.dest}: already exists (give a new directory)")
    wanted: dict[str, None] = {}
    commits = []
    for c in args.commits:
        objs = objects_of(source, c, args.path)
        commits.append(objs[0])
        wanted.update(dict.fromkeys(objs))
    check = git(source, "cat-file", "--batch-check", input="\n".join(wanted).encode() + b"\n").decode()
    have = [line.split()[0] for line in check.splitlines() if not line.endswith(" missing")]
    missing = [line.split()[0] for line in check.splitlines() if line.endswith(" missing")]
    pack = git(source, "pack-objects", "--stdout", input="\n".join(have).encode() + b"\n")
    subprocess.run(["git", "init", "-q", "--bare", str(args.dest)], check=True)
    git(args.dest, "index-pack", "--stdin", input=pack)
    (args.dest / "shallow").write_text("".join(f"{c}\n" for c in sorted(set(commits))))
    for c in commits:
        git(args.dest, "update-ref", f"refs/slim/{c}", c)
    size = sum(p.stat().st_size for p in args.dest.rglob("*") if p.is_file())
    print(f"{args.dest}: {len(commits)} commit(s), {len(have)} objects, {size / 2**20:.1f} MiB"
          + (f"; {len(missing)} blob(s) the source lacks were left out: {', '.join(missing[:5])}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
