"""``--keep-job-dirs``: a copy of each job's directory for the user to read after the run (logs,
compute-sanitizer's XML), of its files and directories only."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def keep(workdir: Path, outer: Path, dest: Path) -> str | None:
    """Copy ``workdir`` (and the tool's reports beside it, in ``outer``) to ``dest``; None, or why
    part of it could not be copied. Named pipes, sockets and device nodes are skipped: the tool
    leaves its own (``NVIDIA-treetracker-*/pipe-*``) in the worker's directory, and copying a pipe
    blocks or raises, which made every sanitizer job an internal error."""
    try:
        shutil.copytree(workdir, dest, dirs_exist_ok=True, symlinks=True, ignore=_not_plain)
        for report in outer.glob("*.xml"):  # compute-sanitizer's, written beside the worker's directory
            if report.is_file() and not report.is_symlink():
                shutil.copy2(report, dest / report.name)
    except (OSError, shutil.Error) as exc:
        return f"the job's directory was kept only in part: {exc}"
    return None


def _not_plain(directory: str, names: list[str]) -> set[str]:
    """What ``copytree`` leaves out: temporary files, and anything neither a file, a directory nor
    a link (a pipe, a socket, a device node)."""
    out: set[str] = set()
    for name in names:
        if name.endswith(".tmp"):
            out.add(name)
            continue
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            out.add(name)
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            out.add(name)
    return out
