"""Run the ``setup`` commands (build or install the repository) in a sandbox of their own.

``python -m gpu_gate.github.setup_sandbox --venv DIR [--readonly PATH ...] [--sandbox MODE] -- CMD ARGS...``

``setup`` runs code the pull request controls (its ``setup.py``, its build backend) before
``gpu-gate check`` runs in the same job. Unsandboxed, that code could rewrite ``.git`` (gpu-gate
reads the base's policy and specs from git), plant entries in the result cache, or write into
gpu-gate's own files and the runner interpreter's site-packages, where a ``sitecustomize.py`` or a
``.pth`` file would run inside gpu-gate's judge. So:

- the command installs into a virtual environment of its own, DIR (made here with
  ``--system-site-packages`` and without pip, plus a ``.pth`` file that adds the runner
  interpreter's own site directories, so that its torch and pip stay importable when the runner's
  interpreter is itself a venv). ``python`` and ``pip`` in the command are DIR's. gpu-gate's workers
  then run with ``DIR/bin/python`` (``gpu-gate check --worker-python``); the judge keeps the runner's
  interpreter, which setup could not write;
- under bubblewrap, the whole filesystem is read-only, but for the workspace (the checkout), DIR and
  ``~/.cache`` (pip's cache). Inside the workspace, ``.git`` and every ``--readonly`` path (the
  result cache, the report directory, the plan) stay read-only; so do gpu-gate's installation and the
  runner interpreter's, wherever they are. ``/tmp`` is private; ``/dev`` is a minimal one plus the
  NVIDIA device nodes (a build may probe the GPU); the network stays on (pip needs it). New PID
  namespace: nothing the command started outlives it. No capabilities; the environment is scrubbed
  as :mod:`gpu_gate.github.sealed` does;
- after the command, every ``--readonly`` path (and ``.git``) must be the very file or directory it
  was before, and one that did not exist must still not exist: a setup that moved a protected
  directory aside and made a new one in its place fails.

``--sandbox required`` (the default) fails closed, with one ``::error`` line, where bubblewrap cannot
run; ``auto`` then runs the command unsandboxed with a warning, ``off`` always does. On success the
step output ``worker-python`` names DIR's interpreter.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from ..executor import gpu_nodes, sandbox
from .. import proc
from . import sealed

Mode = Literal["required", "auto", "off"]
MODES: tuple[Mode, ...] = ("required", "auto", "off")
PTH_NAME = "_gpu_gate_runner_site.pth"
PIP_SHIM = '#!/bin/sh\nexec "$(dirname -- "$0")/python" -m pip "$@"\n'
HOW_TO_ALLOW = ("to run setup without a sandbox (where it can rewrite .git, the result cache and gpu-gate's own "
                "files), set the action's or the workflow's input `setup-sandbox: auto`")


class SetupError(Exception):
    """Why setup cannot run as asked: one line."""


# --- the virtual environment ---------------------------------------------------------------------------


def runner_site_dirs() -> list[str]:
    """This interpreter's site directories that a venv made with ``--system-site-packages`` from its
    base installation would not see (those of this interpreter's own venv, where it is one)."""
    base = {os.path.realpath(p) for p in site.getsitepackages([sys.base_prefix, sys.base_exec_prefix])}
    out: list[str] = []
    for p in site.getsitepackages():
        if os.path.isdir(p) and os.path.realpath(p) not in base and p not in out:
            out.append(p)
    return out


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def venv_purelib(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", scheme="venv", vars={"base": str(venv), "platbase": str(venv)}))


def pth_text(dirs: Iterable[str]) -> str:
    """A .pth file whose lines add each directory as a site directory (its own .pth files processed)."""
    return "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)


def make_venv(venv: Path) -> Path:
    """DIR made (where it is missing) for this interpreter; its ``python``. Nothing of DIR runs here:
    a DIR left by an earlier setup is not trusted, only written to."""
    import venv as venv_mod

    if not (venv / "pyvenv.cfg").is_file():
        if venv.exists() and any(venv.iterdir()):
            raise SetupError(f"{venv} exists and is not a virtual environment: give --venv a new directory")
        venv_mod.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(venv)
    purelib = venv_purelib(venv)
    purelib.mkdir(parents=True, exist_ok=True)
    (purelib / PTH_NAME).write_text(pth_text(runner_site_dirs()))
    bindir = venv / "bin"
    for name in ("pip", "pip3", f"pip{sys.version_info[0]}.{sys.version_info[1]}"):
        shim = bindir / name
        if not shim.exists():
            shim.write_text(PIP_SHIM)
            shim.chmod(0o755)
    return venv_python(venv)


# --- what the sandbox shows ----------------------------------------------------------------------------


def _real(p: Path | str) -> Path:
    return Path(os.path.realpath(p))


def _inside(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def git_paths(workspace: Path) -> list[Path]:
    """``.git`` of the checkout, and where a ``.git`` file (a worktree, a submodule) points."""
    dot = workspace / ".git"
    out = [dot] if dot.exists() else []
    if dot.is_file():
        for line in dot.read_text(errors="replace").splitlines():
            if line.startswith("gitdir:"):
                gitdir = Path(line.split(":", 1)[1].strip())
                gitdir = gitdir if gitdir.is_absolute() else workspace / gitdir
                out.append(gitdir)
                common = gitdir / "commondir"
                if common.is_file():
                    c = Path(common.read_text().strip())
                    out.append(c if c.is_absolute() else gitdir / c)
    return out


def interpreter_paths(workspace: Path) -> list[Path]:
    """The runner interpreter's installation and gpu-gate's: read-only wherever they are. Plain
    ``sys.path`` entries (``PYTHONPATH``) inside the workspace are the repository's own sources and
    stay writable; the interpreter's prefixes and site directories never do."""
    ws = _real(workspace)
    strong = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable)), str(sandbox.gate_package_dir()),
              *(p for p in sysconfig.get_paths().values() if p), *site.getsitepackages()}
    weak = {p for p in sys.path if p and os.path.isdir(p)}
    out: list[Path] = []
    for p in sorted(strong | weak):
        r = _real(p)
        if not r.exists() or r == Path("/") or r == ws or r in out:
            continue
        if p not in strong and _inside(r, ws):
            continue
        out.append(r)
    return out


@dataclasses.dataclass(frozen=True)
class Layout:
    workspace: Path
    venv: Path
    writable: tuple[Path, ...]  # the workspace, the venv, ~/.cache
    readonly: tuple[Path, ...]  # existing protected paths: .git, --readonly, the interpreter, gpu-gate
    gpu_nodes: tuple[str, ...] = ()


def layout(workspace: Path, venv: Path, readonly: Sequence[Path], cache_home: Path | None) -> Layout:
    ws = _real(workspace)
    writable = [ws, _real(venv)]
    if cache_home is not None:
        writable.append(_real(cache_home))
    ro: list[Path] = []
    for p in [*git_paths(ws), *readonly, *interpreter_paths(ws)]:
        r = _real(p)
        if r.exists() and r != Path("/") and r not in ro:
            ro.append(r)
    return Layout(ws, _real(venv), tuple(writable), tuple(ro), tuple(gpu_nodes.node_names()))


def bwrap_base() -> list[str]:
    """Network on (pip needs it); everything else as the jobs' sandbox."""
    return ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def bwrap_argv(bwrap: str, lay: Layout, argv: Sequence[str]) -> list[str]:
    """Mounts shallow before deep, so the deeper one wins where they nest (``.git`` read-only inside
    the writable workspace; the venv writable inside a read-only tree). Where one path is both, it
    is read-only."""
    devices = [a for node in lay.gpu_nodes for a in ("--dev-bind", node, node)]
    ops: dict[Path, str] = {p: "--bind" for p in lay.writable}
    ops.update({p: "--ro-bind" for p in lay.readonly})
    mounts = [a for p in sorted(ops, key=lambda q: (len(q.parts), str(q))) for a in (ops[p], str(p), str(p))]
    return [bwrap, *bwrap_base(), *devices, *mounts, "--chdir", str(lay.workspace), "--", *argv]


def probe_bwrap() -> tuple[str | None, str]:
    """(bwrap's path, its version) where it starts a sandbox here, else (None, why not)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bubblewrap is not installed (apt-get install bubblewrap)"
    r = proc.run([bwrap, *bwrap_base(), "--", "true"], timeout=30)
    if not r.ok:
        lines = [ln.strip() for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()]
        why = lines[-1] if lines else r.describe()
        restriction = sandbox.userns_restriction() if os.geteuid() != 0 else None
        return None, f"bwrap cannot start a sandbox here ({why})" + (f"; {restriction}" if restriction else "")
    version = proc.run([bwrap, "--version"], timeout=10).stdout.strip()
    return bwrap, version or "bubblewrap"


# --- what must not have changed ------------------------------------------------------------------------


Identity = tuple[int, int, int] | None  # (device, inode, file type) of what the path names, None: nothing


def identity(p: Path) -> Identity:
    try:
        st = os.stat(p)
    except OSError:
        return None
    return st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode)


def moved(before: Mapping[Path, Identity]) -> list[str]:
    """The protected paths that no longer name what they named before the command."""
    out = []
    for p, was in before.items():
        now = identity(p)
        if now != was:
            out.append(f"{p} was {'created' if was is None else 'replaced' if now else 'removed'}")
    return out


# --- running it ----------------------------------------------------------------------------------------


def command_env(env: Mapping[str, str], venv: Path) -> dict[str, str]:
    """The sealed environment (no token, no runner command files), DIR's bin first on PATH."""
    out = sealed.sealed_env(env)
    out.pop("PYTHONHOME", None)
    bindir = str(venv / "bin")
    out["PATH"] = os.pathsep.join([bindir, *(p for p in out.get("PATH", "").split(os.pathsep) if p and p != bindir)])
    out["VIRTUAL_ENV"] = str(venv)
    return out


@dataclasses.dataclass(frozen=True)
class Outcome:
    returncode: int
    sandboxed: bool
    python: Path
    problems: tuple[str, ...] = ()


def run_setup(argv: Sequence[str], venv: Path, *, workspace: Path, readonly: Sequence[Path] = (),
              mode: Mode = "required", env: Mapping[str, str] | None = None,
              cache_home: Path | None = None) -> Outcome:
    """Make DIR, run ``argv`` (sandboxed as ``mode`` says) and check the protected paths afterwards.
    Raises :class:`SetupError` where ``required`` cannot be met."""
    if not argv:
        raise SetupError("no setup command given")
    workspace = workspace.resolve()
    base_env = dict(os.environ if env is None else env)
    bwrap, detail = (None, "setup-sandbox is off") if mode == "off" else probe_bwrap()
    if bwrap is None and mode == "required":
        raise SetupError(f"setup cannot run in a sandbox: {detail}; {HOW_TO_ALLOW}")
    venv = Path(os.path.abspath(venv))
    python = make_venv(venv)
    protected = [workspace / p if not p.is_absolute() else p for p in readonly]
    before = {p: identity(p) for p in [*git_paths(workspace), *protected]}
    own_cache = cache_home is not None
    if cache_home is None:
        cache_home = Path(base_env.get("HOME") or os.path.expanduser("~")) / ".cache"
    cache_home = Path(os.path.abspath(cache_home))
    cache_home.mkdir(parents=True, exist_ok=True)
    cenv = command_env(base_env, venv)
    if own_cache:  # pip, torch and the rest keep their caches here, not in ~/.cache (read-only then)
        cenv["XDG_CACHE_HOME"] = str(cache_home)
    if bwrap is not None:
        cenv["TMPDIR"] = "/tmp"
        lay = layout(workspace, venv, protected, cache_home)
        print(f"setup: sandboxed by {detail}: writable {', '.join(map(str, lay.writable))}; read-only: .git, "
              f"{', '.join(str(p) for p in protected) or 'nothing else named'}, gpu-gate and the runner's "
              f"interpreter; network on; python is {python}", flush=True)
        full = bwrap_argv(bwrap, lay, argv)
    else:
        print(f"::warning title=gpu-gate::setup runs WITHOUT a sandbox ({detail}): it can rewrite .git, the "
              f"result cache, gpu-gate's own files and the runner's interpreter; python is {python}", flush=True)
        full = list(argv)
    try:
        rc = subprocess.run(full, cwd=workspace, env=cenv).returncode
    except OSError as exc:
        raise SetupError(f"cannot run {full[0]}: {exc.strerror}") from exc
    return Outcome(rc, bwrap is not None, python, tuple(moved(before)))


def write_output(name: str, value: str) -> None:
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(f"{name}={value}\n")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gpu_gate.github.setup_sandbox",
                                description="Run the setup commands sandboxed, installing into a venv of their own.")
    p.add_argument("--venv", type=Path, required=True, help="the venv to install into (made where missing)")
    p.add_argument("--workspace", type=Path, default=Path.cwd(), help="the checkout (default: the current directory)")
    p.add_argument("--readonly", type=Path, action="append", default=[], metavar="PATH",
                   help="a path, relative to the workspace, that setup must not write, create or replace")
    p.add_argument("--sandbox", choices=MODES, default="required",
                   help="required (default): fail where bubblewrap cannot run; auto: then run unsandboxed; off: never")
    p.add_argument("--cache-home", type=Path, default=None, metavar="DIR",
                   help="the cache directory setup may write (XDG_CACHE_HOME; default: ~/.cache, which outlives the "
                        "job; a directory of the job's own on a runner that keeps state between jobs)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    return args


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    try:
        out = run_setup(args.command, args.venv, workspace=args.workspace, readonly=args.readonly, mode=args.sandbox,
                        cache_home=args.cache_home)
    except SetupError as exc:
        print(f"::error title=gpu-gate::{exc}", flush=True)
        return 2
    if out.problems:
        print(f"::error title=gpu-gate::setup changed what gpu-gate trusts: {'; '.join(out.problems)}", flush=True)
        return 1
    if out.returncode != 0:
        print(f"::error title=gpu-gate::setup failed (exit code {out.returncode})", flush=True)
        return out.returncode
    write_output("worker-python", str(out.python))
    print(f"setup done ({'sandboxed' if out.sandboxed else 'unsandboxed'}); gpu-gate's workers run with {out.python}",
          flush=True)
    return 0


def _seal() -> None:
    """Start again without any token, keeping the step's output file (the command gets none)."""
    if sealed.dropped(os.environ):
        sealed.exec_sealed([sys.executable, *sys.orig_argv[1:]], keep=("GITHUB_OUTPUT",))


if __name__ == "__main__":
    _seal()
    sys.exit(main(sys.argv[1:]))
