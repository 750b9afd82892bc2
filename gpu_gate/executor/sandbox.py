"""The sandbox a job's worker runs in: what the code under review can see, write and outlive.

The executor runs every job's process tree inside one of these, chosen once per run:

- ``bwrap`` (bubblewrap): a new PID, mount, network and IPC namespace, all capabilities
  dropped. The whole filesystem is read-only; ``/tmp`` is a private tmpfs; ``/dev`` is a
  minimal one plus, on a GPU job, the NVIDIA driver's shared nodes and its own GPU's alone
  (:mod:`gpu_gate.executor.gpu_nodes`); the report directory, the result
  cache and the run's other job directories are empty read-only mounts; the job's own
  directory is the only writable place that outlives the sandbox.
- ``unshare`` (util-linux), where bubblewrap is missing or cannot start: new PID, mount and
  network namespaces; the repository, the report directory, the cache, the run's job
  directories and Python's installation (gpu-gate's included) are bind-mounted read-only, the
  job's own directory writable again, and the capabilities are dropped before the worker starts.
  ``/tmp``, ``/dev`` (every GPU's node) and the rest of the filesystem stay as they are: weaker
  than bwrap, and said so.
- ``none``: a plain subprocess in its own session. Nothing above holds; the executor still kills
  the session and hunts down processes that left it (see :mod:`gpu_gate.executor.containment` and
  :mod:`gpu_gate.executor.orphans`).

A tool that watches the worker (compute-sanitizer's front end) runs a bwrap sandbox as its program,
from outside (:func:`wrap`'s ``tool``): it shares only the sandbox's network namespace, a new empty
one. In an unshare sandbox it runs inside, with the worker (see :attr:`Available.tool_outside`).

In both namespaced kinds the sandbox's first process (PID 1) is a small shell waiter, not the
worker: it runs the worker, then counts the processes still alive in the namespace and writes
that count to a descriptor the worker does not hold. (Under a tool that watches a bwrap sandbox
from outside, the waiter is the second process and bwrap's own init the first: with a shell as
PID 1, compute-sanitizer never exited, measured on an H100. The worker could then kill the waiter;
the executor reports that as an escape attempt.) When it exits, the kernel kills everything
left in the namespace, so nothing the worker started outlives its job; the count only says that
something tried (an ``escaped-process`` finding). The gate's own processes are in another PID
namespace: a job cannot see their environment or send them a signal.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import site
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from .. import proc

Kind = Literal["bwrap", "unshare", "none"]
Mode = Literal["required", "auto", "off"]

# Runs in bash as the sandbox's PID 1 (signals from inside the namespace cannot kill it). FD is
# the descriptor for the worker's status and the count (bash, since dash takes one-digit
# descriptors only); the worker runs with it closed. PID 1 cannot re-raise the signal that killed
# the worker on itself, so the status says it: 128 + the signal, as the shell reports it.
# Each process left is also named, on a line "left PID PPID TICKS CMDLINE" (TICKS: when it started,
# in clock ticks after the waiter; see gpu_gate.executor.leftovers), with builtins only: a command
# run to read them would be one more process in the count.
WAITER = r"""
echo started >&FD
"$@" FD>&-
rc=$?
n=0
read -r s0 < /proc/$$/stat
f0=(${s0##*) })
for p in /proc/[0-9]*; do
  [ "$p" = "/proc/$$" ] || [ "$p" = /proc/1 ] && continue
  read -r s < "$p/stat" 2>/dev/null || continue
  case "${s##*) }" in Z*) continue ;; esac
  n=$((n+1))
  [ $n -le 20 ] || continue
  f=(${s##*) })
  a=()
  mapfile -d '' -t a < "$p/cmdline" 2>/dev/null
  c="${a[*]}"
  if [ -z "$c" ]; then c="${s#*(}"; c="[${c%)*}]"; fi
  c="${c//$'\n'/ }"
  echo "left ${p#/proc/} ${f[1]} $(( f[19] - f0[19] )) ${c:0:400}" >&FD
done
echo "$rc $n" >&FD
exit $rc
"""


@dataclasses.dataclass(frozen=True)
class Available:
    """What this machine offers: the best sandbox that works, and why the better ones do not."""

    kind: Kind
    path: str | None  # the bwrap or unshare executable
    detail: str  # its version, or why no sandbox works

    @property
    def works(self) -> bool:
        return self.kind != "none"

    @property
    def tool_outside(self) -> bool:
        """Whether a tool that watches the worker (compute-sanitizer) runs outside its sandbox. Not
        under ``unshare``: there, on an H100, the sandboxed jobs under the real tool failed (the same
        run's bubblewrap jobs passed), so the tool stays inside, as before, with its report in reach."""
        return self.kind != "unshare"

    @property
    def protects_files(self) -> bool:
        """Whether the report directory and the result cache are out of the worker's reach."""
        return self.kind in ("bwrap", "unshare")


@dataclasses.dataclass(frozen=True)
class Layout:
    """What one job's sandbox shows. Paths are the host's; the sandbox sees them at the same place."""

    repo: Path  # read-only; the worker's working directory
    jobdir: Path  # the job's own directory: writable, and the only thing it keeps
    hide: tuple[Path, ...] = ()  # shown empty and read-only: report dir, result cache, other jobs' dirs
    readonly: tuple[Path, ...] = ()  # shown read-only where they would be hidden (under /tmp or a hidden dir)
    devices: tuple[str, ...] = ()  # the NVIDIA device nodes to bind (a GPU job's: see gpu_nodes)
    # the tree shown at ``repo``, where it is another one: the base's work tree, seen at the head's
    # path, so that the base's code compiles to the same kernels (paths in line info included)
    source: Path | None = None
    # (a directory of the gate's, where the job sees it): shown read-only at a mount point inside
    # the job's directory (the spec's kept kernels), wherever the gate keeps it
    lent: tuple[tuple[Path, Path], ...] = ()


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def userns_restriction() -> str | None:
    """Why unprivileged user namespaces are refused on this kernel, where it says so."""
    checks = (
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
         "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, "
         "Ubuntu 24.04's default): run the runner as root, or allow bwrap with an AppArmor profile "
         "(see runner/README.md)"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0",
         "unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0)"),
        ("/proc/sys/user/max_user_namespaces", "0", "user namespaces are off (user.max_user_namespaces=0)"),
    )
    for path, bad, why in checks:
        try:
            if Path(path).read_text().strip() == bad:
                return why
        except OSError:
            continue
    return None


def _try(argv: Sequence[str]) -> str | None:
    """None when ``argv`` (a sandbox running ``true``) works, else what went wrong."""
    r = proc.run(argv, timeout=30)
    if r.ok:
        return None
    return _first_line(r.stderr + "\n" + r.stdout) or r.describe()


def _unshare_base(unshare: str) -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [unshare, *user, "--pid", "--fork", "--mount-proc", "--mount", "--net", "--kill-child"]


@functools.lru_cache(maxsize=1)
def probe() -> Available:
    """The best sandbox that really starts here (tried, not guessed), once per process."""
    why: list[str] = []
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        why.append("bwrap: not installed (apt-get install bubblewrap)")
    else:
        err = _try([bwrap, *_bwrap_base(), "--", "true"])
        if err is None:
            version = proc.run([bwrap, "--version"], timeout=10).stdout.strip()
            return Available("bwrap", bwrap, version or "bubblewrap")
        why.append(f"bwrap: {err}")
    unshare = shutil.which("unshare")
    if unshare is None:
        why.append("unshare: not installed (util-linux)")
    else:
        err = _try([*_unshare_base(unshare), "--", "true"])
        if err is None:
            return Available("unshare", unshare, f"util-linux unshare (PID, mount and network namespaces); {why[0]}")
        why.append(f"unshare: {err}")
    restriction = userns_restriction() if os.geteuid() != 0 else None
    if restriction:
        why.append(restriction)
    return Available("none", None, "; ".join(why))


def choose(mode: Mode) -> Available:
    """The sandbox a run with ``runner.sandbox: mode`` uses: none when off, else the probed one."""
    if mode == "off":
        return Available("none", None, "runner.sandbox is off in the policy")
    return probe()


def _bwrap_base(net: bool = True) -> list[str]:
    """The sandbox's root, read-only: the whole machine, or where the minimal view is switched on, the
    least a worker needs (see :mod:`.view`)."""
    from .view import minimal, system_binds, tool_binds

    root = [*system_binds()] if minimal() else ["--ro-bind", "/", "/"]
    tools = [*tool_binds()] if minimal() else []
    return [*root, "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", *tools,
            "--unshare-pid", *(["--unshare-net"] if net else []), "--unshare-ipc", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL"]


def _depth(p: Path) -> int:
    return len(p.parts)


def _existing(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        r = Path(os.path.realpath(p))
        if r.exists() and r != Path("/") and r not in out:
            out.append(r)
    return out


def _source(layout: Layout, p: Path) -> Path:
    """What is mounted at ``p``: itself, or for the repository and anything inside it, the same
    place in the tree shown there instead (never the repository's own files over that tree)."""
    if layout.source is None:
        return p
    repo = Path(os.path.realpath(layout.repo))
    if p == repo or repo in p.parents:
        return Path(os.path.realpath(layout.source)) / p.relative_to(repo)
    return p


def _shown(layout: Layout) -> list[Path]:
    """The read-only mounts (the repository first), each where its source exists."""
    return [p for p in _existing((layout.repo, *layout.readonly)) if _source(layout, p).exists()]


def _shown_hidden(layout: Layout) -> list[Path]:
    """The hidden directories to mount over; under a repository shown from another tree, only
    those that exist in that tree too (a mount needs its mount point)."""
    hide = _existing(layout.hide)
    if layout.source is None:
        return hide
    repo, source = Path(os.path.realpath(layout.repo)), Path(os.path.realpath(layout.source))
    return [h for h in hide if repo not in h.parents or (source / h.relative_to(repo)).is_dir()]


def _bwrap_mounts(layout: Layout) -> list[str]:
    """Mounts over the read-only root, shallow before deep, so a deeper one wins where they nest:
    the repository inside a hidden work root is shown again, the report directory inside the
    repository is hidden again."""
    hide = _shown_hidden(layout)
    ops: list[tuple[int, int, list[str]]] = []
    for p in _shown(layout):
        ops.append((_depth(p), 0, ["--ro-bind", str(_source(layout, p)), str(p)]))
    for p in hide:
        ops.append((_depth(p), 1, ["--tmpfs", str(p)]))
    for git, op in _git_covers(layout):  # the checkout's .git: the worker needs the files, never git's
        ops.append((_depth(git), 1, op))
    jobdir = Path(os.path.realpath(layout.jobdir))
    ops.append((_depth(jobdir), 2, ["--bind", str(jobdir), str(jobdir)]))
    for src, dest in layout.lent:  # inside the job's directory: deeper, so after it
        ops.append((_depth(dest), 3, ["--ro-bind", str(src), str(dest)]))
    argv = [a for _, _, op in sorted(ops, key=lambda o: (o[0], o[1])) for a in op]
    # Read-only last: bwrap cannot make a mount point inside a read-only tmpfs.
    ro = [*hide, *(g for g, op in _git_covers(layout) if op[0] == "--tmpfs")]
    return argv + [a for p in ro for a in ("--remount-ro", str(p))]


def _git_covers(layout: Layout) -> list[tuple[Path, list[str]]]:
    """What covers the shown tree's ``.git`` (its configuration may hold a token): an empty directory
    over a directory, an empty file over a file (a work tree's or a submodule's)."""
    repo = Path(os.path.realpath(layout.repo))
    shown = _source(layout, repo) / ".git"
    if shown.is_symlink() or not shown.exists():
        return []
    return [(repo / ".git", ["--tmpfs", str(repo / ".git")] if shown.is_dir() else
             ["--ro-bind", "/dev/null", str(repo / ".git")])]


def bwrap_argv(bwrap: str, layout: Layout, inner: Sequence[str], fd: int, watched: bool = False) -> list[str]:
    """``watched``: a tool runs this sandbox from outside (see :func:`wrap`). The sandbox then keeps
    the tool's network namespace, and bwrap's own init is its first process instead of the waiter
    (with a shell as PID 1, compute-sanitizer never exited: measured on an H100, cause not found);
    else the waiter is PID 1, which no signal from inside can end."""
    return [bwrap, *bwrap_options(layout, watched), *_command(inner, fd)]


def bwrap_options(layout: Layout, watched: bool = False) -> list[str]:
    """bwrap's options for ``layout`` (all but the command): on its command line, or, for a
    sandbox watched by a tool, through a pipe (``--args FD``, see gpu_gate.executor.tool_launch)."""
    devices = [a for node in layout.devices for a in ("--dev-bind", node, node)]
    init = [] if watched else ["--as-pid-1"]
    return [*_bwrap_base(net=not watched), *devices, *_bwrap_mounts(layout), *init, "--chdir", str(layout.repo)]


def _command(inner: Sequence[str], fd: int) -> list[str]:
    return ["--", _bash(), "-c", waiter(fd), "sh", *inner]


def _unshare_setup(layout: Layout) -> str:
    """Shell run as root of the new mount namespace, before the worker: read-only binds, then the
    job directory writable again, then every capability dropped for good."""
    ro = _shown(layout) + _shown_hidden(layout)
    ro.sort(key=_depth)
    lines = ["set -e", "mount --make-rprivate /", _RO_UNDER]
    for p in ro:
        q = _quote(p)
        # Recursive: what is mounted inside a shown directory stays in view (a container's NVIDIA
        # driver libraries, mounted under /usr one by one or as a squashfs: without them a plain
        # bind shows empty places and CUDA finds no driver); each of those mounts read-only too.
        lines.append(f"mount --rbind {_quote(_source(layout, p))} {q} && mount -o remount,bind,ro {q} && _ro_under {q}")
    jd = _quote(Path(os.path.realpath(layout.jobdir)))
    # A bind of a path inside a read-only mount is read-only too, until remounted.
    lines.append(f"mount --bind {jd} {jd} && mount -o remount,bind,rw {jd}")
    for src, dest in layout.lent:
        q = _quote(dest)
        lines.append(f"mkdir -p {q} && mount --bind {_quote(src)} {q} && mount -o remount,bind,ro {q}")
    lines.append(f"cd {_quote(layout.repo)}")
    lines.append("set +e")  # the waiter must count after a failing worker too
    return "\n".join(lines)


# Every mount below a directory (read from the mount table) made read-only; a mount that cannot be
# remounted (a pseudo file system) is left as it is.
_RO_UNDER = ('_ro_under() { while read -r _ _ _ _ m _; do case "$m" in "$1"/*) '
             'mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac; done < /proc/self/mountinfo; }')


def _quote(p: Path) -> str:
    import shlex

    return shlex.quote(str(p))


def unshare_argv(unshare: str, layout: Layout, inner: Sequence[str], fd: int) -> list[str]:
    setpriv = shutil.which("setpriv") or "setpriv"
    drop = [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]
    script = _unshare_setup(layout) + "\n" + waiter(fd)
    return [*_unshare_base(unshare), "--", _bash(), "-c", script, "sh", *drop, *inner]


def waiter(fd: int) -> str:
    return WAITER.replace("FD", str(int(fd)))


def _bash() -> str:
    return shutil.which("bash") or "/bin/bash"


def wrap(avail: Available, layout: Layout, inner: Sequence[str], fd: int, tool: Sequence[str] = (),
         args_fd: int | None = None) -> list[str]:
    """``inner`` (the worker's command line) run inside the sandbox; ``fd``: where the waiter
    writes the worker's exit status and the count of processes that outlived it (read it with
    :func:`read_waiter`; without a sandbox, gpu_gate.executor.reaper writes the same).

    ``tool``: a program that runs the sandbox as its own program, from outside it
    (compute-sanitizer's front end, which writes the report), where the sandbox is bwrap; inside
    it, before the worker, where it is unshare. Outside, it stays out of the worker's PID and
    mount namespaces: the worker can neither see nor signal it, and what it writes lies where the
    worker cannot reach. It talks to its collector in the worker's process through their network
    namespace (across namespaces it never connects), so the two share one: a new, empty one made
    for the tool, with no route anywhere, which the sandbox then keeps instead of making its own.
    ``args_fd``: the watched bwrap reads its options from this descriptor (``--args``), which the
    caller fills with :func:`bwrap_options` (see gpu_gate.executor.tool_launch)."""
    if avail.kind == "bwrap":
        assert avail.path is not None
        if not tool:
            return bwrap_argv(avail.path, layout, inner, fd)
        outer = [avail.path, "--dev-bind", "/", "/", "--unshare-net", "--die-with-parent", "--"]
        if args_fd is not None:  # its options come through a pipe: bwrap_options(layout, watched=True)
            return [*outer, *tool, avail.path, "--args", str(int(args_fd)), *_command(inner, fd)]
        return [*outer, *tool, *bwrap_argv(avail.path, layout, inner, fd, watched=True)]
    if avail.kind == "unshare":  # the tool inside the sandbox (see Available.tool_outside)
        assert avail.path is not None
        return unshare_argv(avail.path, layout, [*tool, *inner], fd)
    # No sandbox: the worker's own subreaper, which writes on ``fd`` what the waiter writes
    return [*reaper_argv(fd), *tool, *inner]


def reaper_argv(fd: int) -> list[str]:
    """The command line that runs a program under gpu_gate.executor.reaper, which writes on ``fd``."""
    from . import reaper

    return [sys.executable, "-I", "-S", os.path.abspath(reaper.__file__), str(int(fd))]


def read_waiter(text: str) -> tuple[int | None, int]:
    """(the worker's exit status, negative for a signal; the processes that outlived it) from what
    the waiter wrote; (None, 0) when it did not finish (the sandbox itself was killed)."""
    lines = text.splitlines()
    parts = lines[-1].split() if lines and lines[0] == "started" else []
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None, 0
    rc, n = int(parts[0]), int(parts[1])
    return (-(rc - 128) if rc > 128 else rc), n


def waiter_started(text: str) -> bool:
    """Whether the waiter started its worker (from what it wrote)."""
    return text.startswith("started\n")


def python_install_paths() -> tuple[Path, ...]:
    """Where the interpreter, its standard library and every installed package (gpu-gate's own
    installation included) live: shown read-only in the sandbox."""
    import gpu_gate

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             str(Path(gpu_gate.__file__).resolve().parent.parent)}
    paths.update(p for p in sysconfig.get_paths().values() if p)
    try:
        paths.update(site.getsitepackages())
    except AttributeError:  # an old virtualenv's site module
        pass
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    return tuple(Path(p) for p in sorted(paths))


def gate_package_dir() -> Path:
    """gpu-gate's own package directory (what a worker must never write)."""
    import gpu_gate

    return Path(gpu_gate.__file__).resolve().parent
