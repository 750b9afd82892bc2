"""Where and how the disguised replay's program runs (see :mod:`gpu_gate.judge.disguised`).

The executor prepares, for the equivalence check, one launch per side (the head's code and, in a pull
request, the base's): a directory of its own, a command line ``python <dir>/train.py`` run from the
repository, the environment of a training job (the gate's variables and cache settings gone, a home
directory of its own in which Triton, CuPy and the driver keep their caches: empty, so nothing the
worker compiled or planted reaches the program), and the sandbox of a worker with every file of
gpu-gate's installation hidden: its package directory and its distribution's metadata are empty
directories there, the files it installed elsewhere (an editable install's path hooks) read as empty
files, and a source checkout it runs from is not shown. The judge starts it, when it has chosen the
cases (the command line is handed over in the judge's job file).

Under bubblewrap the program's PID 1 is bwrap's own init, not the workers' waiter. Under ``unshare``
the gate's files stay readable (that sandbox shows hidden places read-only, not empty), and without
a sandbox the program is a plain process in its own session: it still has no gate module loaded.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import site
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from . import sandbox
from .argv import _env_for, _layout
from .options import ExecOptions

# The workers' cache and temporary-file variables: a user's process has none of them set (its caches
# are under its home directory, which the program's is).
_WORKER_ONLY_ENV = ("TMPDIR", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "CUPY_CACHE_DIR", "CUDA_CACHE_PATH")
DIR = {"candidate": "d", "base": "db"}  # the programs' directories, beside the job's workers'


@functools.lru_cache(maxsize=1)
def gate_files() -> tuple[tuple[Path, ...], tuple[Path, ...], Path | None]:
    """(directories, files) of gpu-gate's installation to hide, and the source tree it runs from
    (None where it is installed into site-packages). Found once per run: it reads the metadata of
    every installed distribution (0.2 s here, more on a runner with CUDA's wheels), twice for each
    equivalence job, in the gate's one process where the jobs' preparation takes turns for the
    interpreter's lock; on an H200 eight jobs starting at once waited 8 s each for their judge."""
    pkg = sandbox.gate_package_dir()
    dirs, files = [pkg], []
    for dist in _gate_distributions(pkg):
        for f in dist.files or ():
            where = Path(os.path.realpath(str(dist.locate_file(f))))
            if where == pkg or pkg in where.parents:
                continue
            meta = next((p for p in (where, *where.parents) if p.name.endswith((".dist-info", ".egg-info"))), None)
            if meta is not None:
                if meta not in dirs and meta.is_dir():
                    dirs.append(meta)
            elif where.is_file() and where not in files:
                files.append(where)
    tree = pkg.parent
    return tuple(dirs), tuple(files), (None if _in_site(tree) else tree)


def _gate_distributions(pkg: Path) -> list[metadata.Distribution]:
    names = metadata.packages_distributions().get(pkg.name, [])
    found = []
    for name in dict.fromkeys(names):
        try:
            found.append(metadata.distribution(name))
        except metadata.PackageNotFoundError:
            continue
    return found


def _in_site(p: Path) -> bool:
    sites = {os.path.realpath(s) for s in (*site.getsitepackages(), sysconfig.get_paths()["purelib"],
                                           sysconfig.get_paths()["platlib"])}
    return os.path.realpath(p) in sites


def launch(opts: ExecOptions, gpu: str | None, outer: Path, avail: sandbox.Available, check: str, threads: int,
           role: str) -> dict[str, object]:
    """The program's launch for ``role`` (the head's code, ``candidate``, or the base's, ``base``), as the
    judge's job file carries it (see :class:`gpu_gate.judge.disguised.Launch`)."""
    d = outer / DIR[role]
    home = d / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = _env_for(opts, gpu, d, threads, check, avail)
    for name in _WORKER_ONLY_ENV:
        env.pop(name, None)
    env["HOME"] = str(home)
    if opts.pycache is not None:  # the run's bytecode (torch installed without any: see worker_argv), read-only
        env["PYTHONPYCACHEPREFIX"] = str(opts.pycache)
    else:  # never a __pycache__ in the repository (a run without a sandbox shows it writable)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    base = role == "base" and opts.base_root is not None
    remap = avail.protects_files
    # the base's tree is shown at the repository's path, as for the base's worker
    wopts = opts
    if base and not remap and opts.base_root is not None:
        wopts = dataclasses.replace(opts, repo_root=opts.base_root)
    layout = _layout(wopts, gpu, d, avail, source=opts.base_root if base and remap else None)
    dirs, files, tree = gate_files()
    hidden = [*dirs] + ([tree] if tree is not None else [])
    readonly = tuple(p for p in layout.readonly
                     if not any(os.path.realpath(p) == os.path.realpath(h) for h in hidden))
    layout = dataclasses.replace(layout, readonly=readonly, hide=(*layout.hide, *dirs))
    # the base's code runs with gpu-gate's own interpreter, as the base's worker does
    python = str(opts.worker_python) if opts.worker_python is not None and not base else sys.executable
    inner = [python, str(d / "train.py")]
    return {"argv": _argv(avail, layout, inner, files), "env": env, "dir": str(d), "cwd": str(wopts.repo_root)}


def _argv(avail: sandbox.Available, layout: sandbox.Layout, inner: list[str], files: tuple[Path, ...]) -> list[str]:
    if avail.kind == "bwrap":
        assert avail.path is not None
        devices = [a for node in layout.devices for a in ("--dev-bind", node, node)]
        blank = [a for f in files for a in ("--ro-bind", "/dev/null", str(f))]
        return [avail.path, *sandbox._bwrap_base(net=True), *devices, *sandbox._bwrap_mounts(layout), *blank,
                "--chdir", str(layout.repo), "--", *inner]
    if avail.kind == "unshare":
        assert avail.path is not None
        import shutil

        setpriv = shutil.which("setpriv") or "setpriv"
        drop = [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]
        script = sandbox._unshare_setup(layout) + '\nexec "$@"'
        return [*sandbox._unshare_base(avail.path), "--", sandbox._bash(), "-c", script, "sh", *drop, *inner]
    return inner
