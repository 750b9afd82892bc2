"""The one place where gpu-gate asks git anything.

Every query runs ``git`` through :func:`gpu_gate.proc.run`. Queries whose output
can be large (diffs, tree listings, file contents) send git's stdout to a file:
``proc.run`` keeps only a bounded head and tail of a stream in memory, and a
diff of 10,000 files or a batch of file contents must arrive whole, byte for byte.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from . import proc
from .errors import GitError

GIT_TIMEOUT_S = 300.0
# Paths are read raw (-z) and never quoted, so spaces, tabs, newlines and
# non-ASCII names survive.
_GIT = ("git", "-c", "core.quotePath=false")
_ZERO_SHA = "0" * 40
_DEEPEN_STEPS = (50, 500, 5000)

_GITLINK = "160000"  # the tree-entry mode of a submodule
_STATUS = {"A": "added", "M": "modified", "D": "deleted", "R": "renamed", "C": "copied", "T": "type_changed"}


@dataclasses.dataclass(frozen=True)
class FileChange:
    path: str  # repo-relative, at head (for deletions: the deleted path)
    status: str  # added | modified | deleted | renamed | copied | type_changed
    old_path: str | None = None  # for renamed and copied files
    binary: bool = False
    # A git submodule (mode 160000) on either side: its (old, new) commit, all zeros where absent.
    gitlink: tuple[str, str] | None = None


def _env() -> dict[str, str]:
    env = proc.scrubbed_env()  # git needs no token to read the checkout
    env["GIT_TERMINAL_PROMPT"] = "0"  # never wait for a password on a runner
    env["LC_ALL"] = "C"
    return env


def _run(repo: Path | str, args: Iterable[str], input: bytes | None = None) -> proc.ProcResult:
    res = proc.run([*_GIT, *args], cwd=repo, env=_env(), timeout=GIT_TIMEOUT_S, input=input)
    if res.not_found:
        raise GitError("git is not installed or not on PATH", "install git and try again")
    if res.timed_out:
        raise GitError(f"git did not answer: {res.describe()}")
    return res


def _out(repo: Path | str, *args: str) -> str:
    """Run a git query with a short answer; a failure is a GitError with git's own words."""
    res = _run(repo, args)
    if not res.ok:
        raise GitError(f"git {' '.join(args)} failed: {_first_line(res.stderr)}")
    return res.stdout.strip()


# Answers about commits named by their full object id never change (git's objects are immutable):
# a run asks several of them more than once (the tree of the head for the policy, the change, the
# specs and the result cache's keys), and each question is two processes. Kept for the process.
_ANSWERS: dict[tuple[str, tuple[str, ...]], bytes] = {}
_ANSWERS_MAX_BYTES = 256 << 20
_answered_bytes = 0


def _immutable(args: list[str]) -> bool:
    """``ls-tree`` of one commit, or ``diff`` of two, each given by its full object id."""
    if not args or args[0] not in ("ls-tree", "diff") or "--end-of-options" not in args:
        return False
    revs = args[args.index("--end-of-options") + 1:]
    revs = revs[:revs.index("--")] if "--" in revs else revs
    return len(revs) == (2 if args[0] == "diff" else 1) and all(_looks_like_sha(r) for r in revs)


def _capture(repo: Path | str, args: Iterable[str], input: bytes | None = None) -> bytes:
    """Run git with stdout sent to a file and return all of it, unbounded and undecoded."""
    global _answered_bytes
    args = list(args)
    key = (os.path.realpath(repo), tuple(args)) if input is None and _immutable(args) else None
    if key is not None and key in _ANSWERS:
        return _ANSWERS[key]
    data = _capture_now(repo, args, input)
    if key is not None and _answered_bytes + len(data) <= _ANSWERS_MAX_BYTES:
        _ANSWERS[key] = data
        _answered_bytes += len(data)
    return data


def _capture_now(repo: Path | str, args: list[str], input: bytes | None) -> bytes:
    with tempfile.TemporaryDirectory(prefix="gpu-gate-git-") as tmp:
        out = Path(tmp) / "stdout"
        # `sh -c 'exec "$@" >"$0"' FILE git ...`: the arguments are passed as
        # positional parameters, so nothing is ever re-parsed by the shell.
        argv = ["sh", "-c", 'exec "$@" >"$0"', str(out), *_GIT, *args]
        res = proc.run(argv, cwd=repo, env=_env(), timeout=GIT_TIMEOUT_S, input=input)
        if res.timed_out:
            raise GitError(f"git did not answer: {res.describe()}")
        if not res.ok:
            raise GitError(f"git {' '.join(args[:3])} failed: {_first_line(res.stderr)}")
        return out.read_bytes() if out.exists() else b""


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else "no message"


def _decode(raw: bytes) -> str:
    return os.fsdecode(raw) if os.name != "nt" else raw.decode("utf-8", "replace")


# --- repository and refs ---------------------------------------------------------------

def repo_root(path: Path | str) -> Path:
    """The top of the git work tree that contains ``path``."""
    p = Path(path)
    hint = "run gpu-gate inside a git checkout, or pass --repo"
    if not p.is_dir():
        raise GitError(f"not a git repository: {path}", hint)
    res = _run(p, ["rev-parse", "--show-toplevel"])
    if not res.ok or not res.stdout.strip():
        raise GitError(f"not a git repository: {path}", hint)
    return Path(res.stdout.strip())


def resolve(repo: Path | str, ref: str) -> str:
    """The commit sha that ``ref`` names."""
    res = _run(repo, ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"])
    if not res.ok or not res.stdout.strip():
        name = ref.removeprefix("origin/")
        raise GitError(
            f"unknown git ref: {ref}",
            f"run `git fetch origin {name}` first, or pass --base/--head with a ref that exists",
        )
    return res.stdout.strip()


def _resolve_or_fetch(repo: Path | str, ref: str) -> str:
    """Resolve ``ref``; a missing commit sha or ``<remote>/<branch>`` is fetched from the remote first.

    A default actions/checkout holds only the head commit, so the event's base sha
    (or ``origin/<branch>``) is usually not there yet.
    """
    try:
        return resolve(repo, ref)
    except GitError:
        remote = _pick_remote(repo)
        name = ref.removeprefix(f"{remote}/") if remote else ref
        if remote is None or (name == ref and not _looks_like_sha(ref)):
            raise
        target = name if _looks_like_sha(name) else f"+{name}:refs/remotes/{remote}/{name}"
        # Fetching with a depth would make a complete clone shallow: only a shallow one gets it.
        depth = ["--depth=1"] if is_shallow(repo) else []
        _run(repo, ["fetch", "--quiet", "--no-tags", *depth, remote, target])
        return resolve(repo, ref)


def _looks_like_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def is_detached(repo: Path | str) -> bool:
    return not _run(repo, ["symbolic-ref", "--quiet", "HEAD"]).ok


def is_shallow(repo: Path | str) -> bool:
    return _out(repo, "rev-parse", "--is-shallow-repository") == "true"


def remotes(repo: Path | str) -> list[str]:
    return [r for r in _out(repo, "remote").splitlines() if r.strip()]


def merge_base(repo: Path | str, base: str, head: str) -> str:
    """The merge base of ``base`` and ``head``, deepening a shallow clone if it has to."""
    base_sha, head_sha = _resolve_or_fetch(repo, base), _resolve_or_fetch(repo, head)
    found = _merge_base(repo, base_sha, head_sha)
    if found:
        return found
    if not is_shallow(repo):
        raise GitError(
            f"{base} and {head} have no common history (no merge base)",
            "pass --base with a branch or commit that the head was built on",
        )
    remote = _pick_remote(repo)
    if remote is not None:
        found = _deepen_until_found(repo, remote, base_sha, head_sha)
        if found:
            return found
        if not is_shallow(repo):
            raise GitError(
                f"{base} and {head} have no common history (no merge base)",
                "pass --base with a branch or commit that the head was built on",
            )
    raise GitError(
        f"cannot find the merge base of {base} and {head}: this is a shallow clone",
        "set `fetch-depth: 0` on actions/checkout, or run `git fetch --unshallow`",
    )


def _merge_base(repo: Path | str, a: str, b: str) -> str | None:
    res = _run(repo, ["merge-base", a, b])
    return res.stdout.strip() or None if res.ok else None


def _pick_remote(repo: Path | str) -> str | None:
    names = remotes(repo)
    if not names:
        return None
    return "origin" if "origin" in names else names[0]


def _deepen_until_found(repo: Path | str, remote: str, base_sha: str, head_sha: str) -> str | None:
    for step in _DEEPEN_STEPS:
        if not _run(repo, ["fetch", "--quiet", "--no-tags", f"--deepen={step}", remote, base_sha, head_sha]).ok:
            break
        found = _merge_base(repo, base_sha, head_sha)
        if found:
            return found
    _run(repo, ["fetch", "--quiet", "--no-tags", "--unshallow", remote, base_sha, head_sha])
    return _merge_base(repo, base_sha, head_sha)


# --- diffs -------------------------------------------------------------------------------

def changed_files(repo: Path | str, base: str, head: str) -> list[FileChange]:
    """Files changed on ``head`` since it left ``base``: ``git diff base...head``."""
    return diff(repo, merge_base(repo, base, head), resolve(repo, head))


def diff(repo: Path | str, old: str, new: str | None) -> list[FileChange]:
    """Files that differ between two commits (two-dot), renames detected. With ``new=None``,
    between ``old`` and the work tree: uncommitted changes and untracked (not ignored) files."""
    options = ["diff", "--no-ext-diff", "--no-textconv", "--no-relative", "-z", "-M"]
    revs = ["--end-of-options", old, *([new] if new else [])]
    status_raw = _capture(repo, [*options, "--raw", "--no-abbrev", *revs])
    numstat_raw = _capture(repo, [*options, "--numstat", *revs])
    binary = _binary_paths(numstat_raw)
    changes = [dataclasses.replace(c, binary=c.path in binary) for c in _parse_name_status(status_raw)]
    if new is None:
        changes += [FileChange(p, "added", binary=_looks_binary(Path(repo) / p)) for p in untracked(repo)]
    return changes


_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.M)


def changed_lines(repo: Path | str, old: str, new: str | None, paths: Iterable[str]) -> dict[str, list[tuple[int, int]]]:
    """For each of ``paths`` that differs between ``old`` and ``new`` (None: the work tree), the
    line ranges (first, last; 1-based, at ``new``) that the change added or rewrote. A hunk that
    only deletes lines is the line after the deletion. An untracked file is all changed."""
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    raw = _capture(repo, ["diff", "--no-ext-diff", "--no-textconv", "--no-relative", "--no-color", "-U0",
                          "--end-of-options", old, *([new] if new else []), "--", *wanted])
    out: dict[str, list[tuple[int, int]]] = {}
    for chunk in re.split(rb"^diff --git ", raw, flags=re.M)[1:]:
        target = re.search(rb"^\+\+\+ b/(.*)$", chunk, re.M)
        if target is None:
            continue  # deleted, or binary
        ranges = []
        for first, count in _HUNK.findall(chunk):
            n = int(count) if count else 1  # "+5" is one line
            start = max(int(first), 1)
            ranges.append((start, start + n - 1) if n else (start, start))
        out[_decode(target.group(1))] = ranges
    if new is None:
        for path in set(untracked(repo)) & set(wanted):
            try:
                count = (Path(repo) / path).read_bytes().count(b"\n")
            except OSError:
                continue
            out[path] = [(1, max(count, 1))]
    return out


def tracked_under(repo: Path | str, directory: str, rev: str | None = None) -> list[str]:
    """The paths git tracks under ``directory`` (repo-relative): at ``rev``, else in the index."""
    args = ["ls-tree", "-r", "-z", "--name-only", rev, "--", directory] if rev else \
        ["ls-files", "-z", "--cached", "--", directory]
    raw = _capture(repo, args)
    return sorted(_decode(p) for p in raw.split(b"\0") if p)


def untracked(repo: Path | str) -> list[str]:
    """Files in the work tree that git does not track and does not ignore."""
    raw = _capture(repo, ["ls-files", "-z", "--others", "--exclude-standard"])
    return sorted(_decode(p) for p in raw.split(b"\0") if p)


def _looks_binary(path: Path) -> bool:
    """As git decides for a diff: a NUL byte in the first 8000 bytes."""
    try:
        with open(path, "rb") as f:
            return b"\0" in f.read(8000)
    except OSError:
        return False


def _parse_name_status(raw: bytes) -> list[FileChange]:
    """``--name-status -z`` or ``--raw -z`` output; the raw form's modes tell submodules apart."""
    fields = raw.split(b"\0")
    changes: list[FileChange] = []
    i = 0
    while i < len(fields) and fields[i]:
        meta = fields[i].decode("ascii").split()  # raw: ":OLDMODE NEWMODE OLDSHA NEWSHA STATUS"
        code = meta[-1][:1]
        status = _STATUS.get(code, "modified")
        gitlink = (meta[2], meta[3]) if len(meta) == 5 and _GITLINK in (meta[0][1:], meta[1]) else None
        if code in ("R", "C"):
            old, new = _decode(fields[i + 1]), _decode(fields[i + 2])
            changes.append(FileChange(new, status, old_path=old, gitlink=gitlink))
            i += 3
        else:
            changes.append(FileChange(_decode(fields[i + 1]), status, gitlink=gitlink))
            i += 2
    return changes


def _binary_paths(raw: bytes) -> set[str]:
    """Paths that ``--numstat`` reports as binary (``-\\t-\\t``)."""
    fields = raw.split(b"\0")
    binary: set[str] = set()
    i = 0
    while i < len(fields) and fields[i]:
        added, _, rest = fields[i].partition(b"\t")
        _, _, path = rest.partition(b"\t")
        if path:  # a plain change: "A\tD\tpath"
            name, i = path, i + 1
        else:  # a rename or copy: "A\tD\t" then old and new paths
            name, i = fields[i + 2], i + 3
        if added == b"-":
            binary.add(_decode(name))
    return binary


# --- trees and contents ----------------------------------------------------------------

def list_files(repo: Path | str, rev: str | None) -> list[str]:
    """Every file in ``rev``; with ``rev=None``, the work tree (tracked and untracked, not ignored)."""
    if rev is None:
        raw = _capture(repo, ["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        paths = {_decode(p) for p in raw.split(b"\0") if p}
        return sorted(p for p in paths if os.path.lexists(os.path.join(repo, p)))
    return sorted(list_tree(repo, rev))


def list_tree(repo: Path | str, rev: str) -> dict[str, str]:
    """Every blob in ``rev``, mapped to its object id (submodules are left out)."""
    raw = _capture(repo, ["ls-tree", "-r", "-z", "--full-tree", "--end-of-options", rev])
    tree: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.partition(b"\t")
        _mode, kind, oid = meta.split(b" ")
        if kind == b"blob":
            tree[_decode(path)] = oid.decode("ascii")
    return tree


def tree_entry(repo: Path | str, rev: str, path: str) -> tuple[str, str, str] | None:
    """(mode, kind, object id) of ``path`` at ``rev``, or None when it is not there. A symbolic link
    has mode 120000 and its blob holds the link's target."""
    raw = _capture(repo, ["ls-tree", "-z", "--full-tree", "--end-of-options", rev, "--", path])
    for entry in raw.split(b"\0"):
        meta, _, name = entry.partition(b"\t")
        if name and _decode(name) == path:
            mode, kind, oid = meta.decode("ascii").split(" ")
            return mode, kind, oid
    return None


def show(repo: Path | str, rev: str, path: str) -> bytes:
    """The contents of ``path`` at ``rev``."""
    tree = list_tree(repo, rev)
    if path not in tree:
        raise GitError(f"{path} does not exist at {rev}")
    return read_blobs(repo, [tree[path]])[tree[path]]


def read_blobs(repo: Path | str, oids: Iterable[str]) -> dict[str, bytes]:
    """Contents of many blobs with ONE ``git cat-file --batch``. A blob's id is a digest of its
    bytes: those read once are kept for the process, within a bound."""
    global _blob_bytes
    asked = list(dict.fromkeys(oids))
    known = {o: _BLOBS[o] for o in asked if o in _BLOBS}
    wanted = [o for o in asked if o not in known]
    if not wanted:
        return known
    raw = _capture(repo, ["cat-file", "--batch"], input="".join(f"{o}\n" for o in wanted).encode())
    blobs: dict[str, bytes] = known
    pos = 0
    for oid in wanted:
        eol = raw.index(b"\n", pos)
        header = raw[pos:eol].split(b" ")
        pos = eol + 1
        if len(header) != 3:  # "<oid> missing"
            continue
        size = int(header[2])
        blobs[oid] = raw[pos:pos + size]
        pos += size + 1
        if header[1] == b"blob" and _looks_like_sha(oid) and _blob_bytes + size <= _BLOBS_MAX_BYTES:
            _BLOBS[oid] = blobs[oid]
            _blob_bytes += size
    return blobs


_BLOBS: dict[str, bytes] = {}
_BLOBS_MAX_BYTES = 256 << 20
_blob_bytes = 0


class Snapshot:
    """The files of one commit, or of the work tree, read lazily in batches and cached."""

    def __init__(self, repo: Path | str, rev: str | None) -> None:
        self.repo = Path(repo)
        self.rev = rev
        self._oids: dict[str, str] = list_tree(repo, rev) if rev else {}
        self.files: frozenset[str] = frozenset(self._oids) if rev else frozenset(list_files(repo, None))
        self._cache: dict[str, bytes] = {}

    def read_many(self, paths: Iterable[str]) -> dict[str, bytes]:
        """Contents of the paths that exist here; missing paths are left out."""
        paths = list(paths)
        todo = [p for p in dict.fromkeys(paths) if p in self.files and p not in self._cache]
        if self.rev is None:
            for p in todo:
                try:
                    self._cache[p] = (self.repo / p).read_bytes()
                except OSError:  # a dangling symlink or a directory: nothing to scan
                    self._cache[p] = b""
        elif todo:
            blobs = read_blobs(self.repo, (self._oids[p] for p in todo))
            for p in todo:
                self._cache[p] = blobs.get(self._oids[p], b"")
        return {p: self._cache[p] for p in paths if p in self._cache}

    def read(self, path: str) -> bytes | None:
        return self.read_many([path]).get(path)

    def object_ids(self, paths: Iterable[str]) -> dict[str, str]:
        """Git's blob id of each path that exists here; for the work tree, computed from the
        file's bytes as git would, so the same content has the same id committed or not."""
        paths = [p for p in dict.fromkeys(paths) if p in self.files]
        if self.rev is not None:
            return {p: self._oids[p] for p in paths}
        contents = self.read_many(paths)
        return {p: blob_id(contents.get(p, b"")) for p in paths}


def blob_id(data: bytes) -> str:
    """The id git gives a blob with these bytes (``git hash-object``, SHA-1 repositories)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's own id


# --- GitHub Actions event ------------------------------------------------------------------

def github_event_refs(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(base, head) shas from the Actions event payload, or None outside a PR/push event."""
    path = env.get("GITHUB_EVENT_PATH")
    if not path:
        return None
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(event, dict):
        return None
    return _refs_from_event(event, env.get("GITHUB_EVENT_NAME", ""))


def _refs_from_event(event: dict[str, object], name: str) -> tuple[str, str] | None:
    pr = event.get("pull_request")
    if isinstance(pr, dict):
        base, head = pr.get("base"), pr.get("head")
        if isinstance(base, dict) and isinstance(head, dict):
            return _pair(base.get("sha"), head.get("sha"))
    group = event.get("merge_group")
    if isinstance(group, dict):
        return _pair(group.get("base_sha"), group.get("head_sha"))
    if name in ("push", "") and "before" in event and "after" in event:
        before = event.get("before")
        if before == _ZERO_SHA:  # a new branch: there is no "before" to compare with
            return None
        return _pair(before, event.get("after"))
    return None


def _pair(base: object, head: object) -> tuple[str, str] | None:
    if isinstance(base, str) and isinstance(head, str) and base and head:
        return base, head
    return None


def add_worktree(repo: Path | str, rev: str, path: Path) -> Path:
    """Check ``rev`` out, detached, into a new work tree at ``path`` (jobs must run the head's code).
    No hook runs: a ``post-checkout`` hook would be code the configuration names, run by the gate."""
    r = _run(repo, ["-c", f"core.hooksPath={os.devnull}", "worktree", "add", "--detach", "--force", str(path), rev])
    if not r.ok:
        raise GitError(f"cannot check out {rev} into a temporary work tree: {_first_line(r.stderr)}",
                       hint="check out the head yourself and omit --head")
    return path


def remove_worktree(repo: Path | str, path: Path) -> None:
    _run(repo, ["worktree", "remove", "--force", str(path)])


# --- the index, as the next commit ---------------------------------------------------------

_IDENTITY = ("-c", "user.name=gpu-gate", "-c", "user.email=gpu-gate@localhost")  # unless the user's env sets one


def staged_commits(repo: Path | str) -> tuple[str, str]:
    """(base, head): HEAD and a commit of the index on top of it, i.e. what `git commit` would record
    now (in a pre-commit hook, git's own GIT_INDEX_FILE). Before the first commit the base is an
    empty root commit. Both are loose objects no ref points to; no ref, index or file changes."""
    tree = _out(repo, "write-tree")
    head = _run(repo, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
    if head.ok and head.stdout.strip():
        base = head.stdout.strip()
    else:
        base = _commit_tree(repo, _empty_tree(repo), None)
    return base, _commit_tree(repo, tree, base)


def _empty_tree(repo: Path | str) -> str:
    res = _run(repo, ["mktree"], input=b"")  # the empty tree's id in this repository's hash
    if not res.ok:
        raise GitError(f"git mktree failed: {_first_line(res.stderr)}")
    return res.stdout.strip()


def _commit_tree(repo: Path | str, tree: str, parent: str | None) -> str:
    args = [*_IDENTITY, "commit-tree", tree, "-m", "gpu-gate: staged changes"] + (["-p", parent] if parent else [])
    return _out(repo, *args)
