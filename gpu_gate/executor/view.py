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
- a C or C++ compiler installed elsewhere (``$CC``, ``$CXX``, or the first ``gcc``/``clang`` on ``PATH``,
  with its installation), and a CUDA driver library found through ``LD_LIBRARY_PATH`` outside ``/usr``;
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
import shlex
import shutil
from pathlib import Path

# /etc files a process may read as it starts (glob patterns; missing ones are skipped)
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "hosts", "host.conf",
       "nsswitch.conf", "gai.conf", "localtime", "timezone", "alternatives", "os-release", "lsb-release",
       "debian_version", "redhat-release", "protocols", "services", "python3*")
TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


# On by default. It was off while a Triton job's launcher build failed in it on an H200 runner's image
# (the C compiler, outside /usr there, was not shown; compiler_dirs shows it now). With these bindings
# the whole GPU suite and `gpu-gate demo --gpu` have run in it on an H200. A runner whose image needs
# something this view does not show can switch it off with GPU_GATE_MINIMAL_VIEW=0 (the whole
# filesystem read-only, the secrets' places still hidden: see sandbox.py), and says so in its report.
SWITCH = "GPU_GATE_MINIMAL_VIEW"


def minimal() -> bool:
    """Whether the minimal view is in force: always, unless the runner set ``GPU_GATE_MINIMAL_VIEW=0``."""
    return os.environ.get(SWITCH, "").strip() != "0"


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
    return tuple(args)


def tool_binds() -> tuple[str, ...]:
    """The bwrap arguments that show the toolkits, compilers and driver libraries installed outside
    ``/usr``: made after the sandbox's private ``/tmp``, so that one kept there is shown too. Read from
    the environment at each job (a runner may set ``CC`` or ``CUDA_HOME`` between gates)."""
    args: list[str] = []
    for root in [*toolkit_dirs(), *compiler_dirs(), *driver_dirs()]:
        if str(root) not in args:
            args += ["--ro-bind", str(root), str(root)]
    return tuple(args)


def _outside_usr(p: Path) -> bool:
    """A directory (or, for a compiler in a home, a program) outside ``/usr`` that is not ``/`` itself."""
    return (p.is_dir() or p.is_file()) and p != Path("/") and p != Path("/usr") and not str(p).startswith("/usr/")


def compiler_dirs() -> list[Path]:
    """The C and C++ compilers a worker may call, where they live outside ``/usr``: Triton builds its
    launcher with ``$CC`` when set, else the first ``gcc`` or ``clang`` on ``PATH`` (``$CXX``, ``g++``,
    ``clang++`` for C++), and a runner's image may put them under ``/opt`` (a toolset, conda's
    compilers). For each: the directory of the name found (a link such as ``/opt/x/bin/gcc``) and the
    installation its target lives in (``bin/``'s parent, where ``libexec`` and the compiler's own
    libraries are), so that the program and the programs it runs are there. A compiler in a home
    (``~/.local/bin/gcc``) shows only itself and its own directories (see ``_home_compiler``): the
    home's other files are the user's secrets."""
    names: list[str] = []
    for var in ("CC", "CXX"):
        words = shlex.split(os.environ.get(var, "") or "")
        names += words[:1]  # "ccache gcc": the program run is the first word
    names += ["gcc", "g++", "cc", "c++", "clang", "clang++"]
    found: list[Path] = []
    for name in names:
        exe = shutil.which(name)
        if not exe:
            continue
        link = Path(os.path.abspath(exe))
        real = Path(os.path.realpath(exe))
        prefixes = [x.parent.parent if x.parent.name == "bin" else x.parent for x in (link, real)]
        if any(_home_like(x) for x in prefixes):
            shown = _home_compiler(link, real)
        else:
            shown = [Path(os.path.realpath(d)) for d in
                     (link.parent, real.parent, real.parent.parent if real.parent.name == "bin" else real.parent)]
        for d in shown:
            if _outside_usr(d) and d not in found:
                found.append(d)
    return found


# A compiler's own directories inside its installation prefix (what gcc and clang run and read)
COMPILER_PARTS = ("lib/gcc", "libexec/gcc", "lib/clang", "lib/gcc-lib", "libexec/clang")


def _homes() -> list[Path]:
    homes = [Path("/root"), Path("/home")]
    for h in (os.environ.get("HOME"), os.path.expanduser("~")):
        if h and h != "/":
            homes.append(Path(os.path.realpath(h)))
    return homes


def _home_like(p: Path) -> bool:
    """A home (``/root``, ``/home/runner``, ``$HOME``), ``/home`` itself, or a dot-directory directly in
    a home (``~/.local``): binding it would show the user's keys, tokens and configuration. A deeper
    installation in a home (a runner's tool cache, a conda under ``~/miniconda3``) is not."""
    real = Path(os.path.realpath(p))
    homes = _homes()
    if real in homes or real.parent == Path("/home"):
        return True
    return real.name.startswith(".") and (real.parent in homes or real.parent.parent == Path("/home"))


def _home_compiler(link: Path, real: Path) -> list[Path]:
    """A compiler installed in a home (``~/.local/bin/gcc``): its installation prefix is the home's
    ``.local`` or the home itself, which holds the user's keys and tokens. Shown: the program (the
    name found and its target, as files) and the compiler's own directories of the prefix, nothing
    else of the home."""
    shown = [link, real]
    for exe in (link, real):
        if exe.parent.name == "bin":
            shown += [exe.parent.parent / part for part in COMPILER_PARTS if (exe.parent.parent / part).is_dir()]
    return shown


def driver_dirs() -> list[Path]:
    """Where the CUDA driver library is outside ``/usr``, when ``LD_LIBRARY_PATH`` is how the runner
    finds it (a container runtime's ``/usr/local/nvidia`` is inside ``/usr``; others are not)."""
    found: list[Path] = []
    for d in (os.environ.get("LD_LIBRARY_PATH") or "").split(":"):
        p = Path(os.path.realpath(d)) if d else None
        if p is not None and _outside_usr(p) and (p / "libcuda.so.1").exists() and p not in found:
            found.append(p)
    return found


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
        if _outside_usr(p) and p not in found:
            found.append(p)
    return found


def hidden_in_repo(repo: Path) -> list[Path]:
    """What of the repository's directory the worker is not shown: its ``.git`` (the worker needs the
    files, never git's configuration, whose ``extraheader`` may hold a token)."""
    git = repo / ".git"
    return [git] if git.exists() or git.is_symlink() else []
