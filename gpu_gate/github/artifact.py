"""The report artifact holds the files the gate wrote in this run, and nothing else.

The report directory sits in the workspace, which the pull request's commit and its sandboxed setup
steps fill. Uploading that directory as it stands would upload whatever else is there: a file the
pull request committed beside the reports, or a symbolic link to a file of the runner's
(``report.md -> ~/.ssh/id_rsa``, ``../_diag``), whose target upload-artifact reads and anyone who can
see the run may download. So the action uploads a new directory of its own instead, outside the
workspace, into which :func:`stage` copies the report files by name, each opened without following a
link, and only where it is a regular file with one name that was written during this run.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

# What the gate writes into its --out directory: the reports (gpu_gate.report.formats) and the plan.
NAMES = ("results.json", "junit.xml", "report.md", "report.sarif", "plan.json")
SLACK_NS = 1_000_000_000  # a file system's clock may lag the process's by up to its granularity


def stage(out: Path, workspace: Path, since_ns: int, temp: Path | None = None) -> tuple[Path | None, list[str]]:
    """Copy the report files in ``out`` that this run wrote (changed after ``since_ns``, a
    ``time.time_ns()``) into a new directory under ``temp``. Returns that directory (None where
    nothing was copied) and a line for each file left out."""
    skipped: list[str] = []
    linked = _linked(out, workspace)
    if linked:
        return None, [f"the report directory is not uploaded: {linked} is a symbolic link"]
    try:
        dir_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None, []  # no report directory: nothing was written
    try:
        copied = {}
        for name in NAMES:
            data, why = _read(dir_fd, name, since_ns)
            if data is not None:
                copied[name] = data
            elif why:
                skipped.append(f"{out / name} is not uploaded: {why}")
    finally:
        os.close(dir_fd)
    if not copied:
        return None, skipped
    dest = Path(tempfile.mkdtemp(prefix="gpu-gate-artifact-", dir=temp))
    for name, data in copied.items():
        (dest / name).write_bytes(data)
    return dest, skipped


def _linked(out: Path, workspace: Path) -> Path | None:
    """The first symbolic link on ``out``'s path below the workspace (all of it, if outside)."""
    out, root = Path(os.path.abspath(out)), Path(os.path.abspath(workspace))
    try:
        parts = out.relative_to(root).parts
    except ValueError:
        root, parts = Path(out.anchor), out.parts[1:]
    current = root
    for part in parts:
        current = current / part
        if current.is_symlink():
            return current
    return None


def _read(dir_fd: int, name: str, since_ns: int) -> tuple[bytes | None, str]:
    """The file's bytes, or None and why not ('' where there is no such file)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, ""
    except OSError as err:  # ELOOP: a symbolic link
        return None, f"not a file of the gate's ({os.strerror(err.errno) if err.errno else err})"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_nlink != 1:
            return None, "it has other names (a hard link), which the gate's files never have"
        if st.st_ctime_ns < since_ns - SLACK_NS:
            return None, "this run did not write it"
        return f.read(), ""


def main(argv: list[str] | None = None) -> int:
    """``python -m gpu_gate.github.artifact OUT --since-ns N``: stage OUT's reports for the upload
    step of a workflow (the reusable workflow's jobs; the action does it in its driver) and write the
    directory as the step output ``dir`` ('' when there is nothing to upload)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m gpu_gate.github.artifact")
    p.add_argument("out", type=Path)
    p.add_argument("--since-ns", type=int, required=True, help="when the step that wrote OUT started")
    args = p.parse_args(argv)
    temp = os.environ.get("RUNNER_TEMP")
    dest, skipped = stage(args.out, Path.cwd(), args.since_ns, Path(temp) if temp else None)
    for line in skipped:
        print(f"::warning title=gpu-gate::{line}", flush=True)
    line = f"dir={dest or ''}\n"
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as f:
            f.write(line)
    else:
        print(line, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
