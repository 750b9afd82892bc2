"""Where the gate writes, made safe against what a pull request commits.

The gate runs unsandboxed, as the runner's user (or a maintainer, on a checkout of the pull request).
A pull request that commits ``.gpu-gate/out/report.md`` as a symbolic link to a file elsewhere would
have the gate create or overwrite that file with lines the pull request controls (exception text, log
tails): a ``.pth`` file in the user's site-packages runs code in the next Python process. So:

- the gate makes its output directory itself, refusing one whose path, inside the repository, passes
  through a symbolic link (:func:`prepare`); where it refuses, the reports go to a new directory of
  the gate's own and the run says where (reports are never lost);
- every file is written to a new temporary file in that directory (``O_CREAT | O_EXCL``: never an
  existing name, never through a link) and then renamed over its name, which replaces a directory
  entry and never follows one (:func:`write_text`);
- a path the repository tracks under the output or the cache directory is a blocking finding
  (:func:`tracked_findings`): nothing the gate writes or reads back there may come from the change.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .. import git
from ..findings import Finding, Severity


class UnsafeDirectory(Exception):
    """The output directory's path goes through a symbolic link, or is not a directory."""


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def prepare(out_dir: Path, root: Path | None = None) -> Path:
    """``out_dir``, made where needed, checked to be a real directory whose path, from ``root`` (the
    repository; default: the working directory) down, holds no symbolic link. Raises
    :class:`UnsafeDirectory` otherwise."""
    out = Path(os.path.abspath(out_dir))
    base = Path(os.path.abspath(root if root is not None else os.getcwd()))
    start = base if _inside(out, base) and out != base else out.parent
    if start == out.parent and not start.exists():
        # outside the repository the path is the runner's own choice (--out): its parents are made
        start.mkdir(parents=True)
    current = start
    for part in out.relative_to(start).parts:
        current = current / part
        if current.is_symlink():
            raise UnsafeDirectory(f"{current} is a symbolic link")
        if current.exists() and not current.is_dir():
            raise UnsafeDirectory(f"{current} is not a directory")
        if not current.exists():
            current.mkdir()
    if out.is_symlink() or not out.is_dir():
        raise UnsafeDirectory(f"{out} is not a directory of its own")
    return out


def fallback() -> Path:
    """A new directory of the gate's own, for the reports when the one asked for was refused."""
    return Path(tempfile.mkdtemp(prefix="gpu-gate-reports-"))


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` without following any link there: a new file beside it, renamed over it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def tracked_findings(repo: Path, dirs: list[Path], rev: str | None = None) -> list[Finding]:
    """A blocking finding for each directory of the gate's (output, cache) under which the repository,
    at ``rev`` (None: the index and work tree), tracks a path."""
    out: list[Finding] = []
    root = Path(os.path.abspath(repo))
    for d in dirs:
        full = Path(os.path.abspath(d if d.is_absolute() else root / d))
        if not _inside(full, root) or full == root:
            continue
        rel = full.relative_to(root).as_posix()
        parts = rel.split("/")
        # what the repository tracks in the directory, or in place of it or of a directory above it
        # (a committed link there points the gate's writes wherever it likes)
        above = [p for p in ("/".join(parts[:i]) for i in range(1, len(parts))) if p in git.tracked_under(root, p, rev)]
        paths = above + git.tracked_under(root, rel, rev)
        if paths:
            shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
            out.append(Finding(check="gate", kind="tracked-output", severity=Severity.ERROR, file=paths[0],
                               message=f"the repository tracks {shown} under {rel}/, where gpu-gate writes its "
                                       f"reports or keeps its cache: nothing there may come from the change (remove "
                                       f"the files from git and add {rel.split('/')[0]}/ to .gitignore)"))
    return out
