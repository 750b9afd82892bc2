"""What a bubblewrap sandbox shows of the machine (issue 39, part 2): the least a worker needs.

The sandbox used to bind the whole filesystem read-only and hide a few directories. A kernel module
that read ``/etc/shadow``, a file in the runner user's home, the checkout's ``.git/config`` (the token
``actions/checkout`` leaves there) or ``/run/credentials`` and raised it as an exception got it into
the reports. Now the sandbox's root is empty but for:

- ``/usr`` (programs, libraries, the NVIDIA driver's libraries, headers, the C compiler Triton calls,
  a CUDA toolkit installed under ``/usr/local``), with ``/bin``, ``/sbin``, ``/lib*`` as the host has
  them (links into ``/usr`` on a merged system);
- a CUDA toolkit installed elsewhere (``$CUDA_HOME``, ``$CUDA_PATH``, the directory of ``nvcc``), and
  compute-sanitizer's directory (the executor adds the latter);
- from ``/etc``, only what programs read to start: the dynamic linker's cache and configuration, the
  user and group names (``passwd``, ``group``: never ``shadow``), ``hosts``, ``nsswitch.conf``, the
  time zone, the alternatives' links (``cc``), the OS release, Python's own configuration;
- ``/sys`` read-only (the CUDA driver reads the GPU's PCI attributes there);
- a private ``/tmp``, a minimal ``/dev`` with only the job's GPU's nodes, a ``/proc`` of its own PID
  namespace (see :mod:`.sandbox`);
- what the job's layout adds: the repository's tree (its ``.git`` hidden), Python's installation and
  site-packages, the job's own directory, the kept kernels (see :mod:`.argv`).

Nothing else: not ``/root``, ``/home``, ``/run`` (``/run/credentials``, the runner's sockets), ``/var``,
``/opt`` (but a toolkit found there), ``/mnt``, the runner's ``_work`` beyond this checkout.
"""
from __future__ import annotations

import functools
import glob
import os
import shutil
from pathlib import Path

# /etc files a process may read as it starts (glob patterns; missing ones are skipped)
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "hosts", "host.conf",
       "nsswitch.conf", "gai.conf", "localtime", "timezone", "alternatives", "os-release", "lsb-release",
       "debian_version", "redhat-release", "protocols", "services", "python3*")
TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


# Off by default: on an H200 runner's image, Triton's launcher build in the minimal view failed with
# FileNotFoundError for the C compiler in every Triton job (cause not yet found), so an honest change
# was red. It stays available, switched on by the runner, until it is shown to work there.
SWITCH = "GPU_GATE_MINIMAL_VIEW"


def minimal() -> bool:
    """Whether the runner switched the minimal view on (``GPU_GATE_MINIMAL_VIEW=1``)."""
    return os.environ.get(SWITCH, "") == "1"


@functools.lru_cache(maxsize=1)
def system_binds() -> tuple[str, ...]:
    """The bwrap arguments that build the sandbox's root from the host's (before the job's own mounts)."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for name in TOP_LINKS:
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for pattern in ETC:
        for path in sorted(glob.glob(f"/etc/{pattern}")):
            args += ["--ro-bind", path, path]
    if Path("/sys").is_dir():
        args += ["--ro-bind", "/sys", "/sys"]
    for root in toolkit_dirs():
        args += ["--ro-bind", str(root), str(root)]
    return tuple(args)


def toolkit_dirs() -> list[Path]:
    """CUDA toolkits outside ``/usr``: ``$CUDA_HOME``, ``$CUDA_PATH``, and where ``nvcc`` and ``ptxas`` live."""
    found: list[Path] = []
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    for tool in ("nvcc", "ptxas"):
        exe = shutil.which(tool)
        if exe:
            candidates.append(str(Path(os.path.realpath(exe)).parent.parent))
    for c in candidates:
        if not c:
            continue
        p = Path(os.path.realpath(c))
        if p.is_dir() and p != Path("/") and not str(p).startswith("/usr/") and p not in found:
            found.append(p)
    return found


def hidden_in_repo(repo: Path) -> list[Path]:
    """What of the repository's directory the worker is not shown: its ``.git`` (the worker needs the
    files, never git's configuration, whose ``extraheader`` may hold a token)."""
    git = repo / ".git"
    return [git] if git.exists() or git.is_symlink() else []
