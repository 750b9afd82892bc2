"""Make gpu-gate importable by the interpreter that has the runner's torch: the action's install step.

Run as a plain script from the action's checkout, before any repository code runs::

    PYTHON -I ACTION_PATH/gpu_gate/github/install.py PYTHON ACTION_PATH DEST

It uses the standard library only (gpu-gate is not importable yet). PYTHON is the interpreter the
checks will run with: the runner's ``python3`` or the action's ``python`` input, the one with the
runner's CUDA torch and the repository's own package. A virtual environment cannot stand in for it:
``--system-site-packages`` sees the base installation's packages, not those of a venv it is made
from, and runner images often keep torch in a venv. So nothing is installed into PYTHON itself:

- when PYTHON already imports gpu-gate of the action's version (a runner image that bakes it in),
  it is used as it is;
- else the ``gpu_gate`` package is copied from the action's checkout into DEST/site and put on
  ``PYTHONPATH`` by the steps that run it. gpu-gate is pure Python: no build, no package index;
- gpu-gate's dependencies that PYTHON lacks are installed into DEST/deps from the package index,
  by requirement, and said so. gpu-gate itself is never installed by name from an index.

With ``--package SOURCE --sha256 DIGEST`` (the action's ``package`` and ``package-sha256`` inputs),
the ``gpu_gate`` package comes from that wheel or sdist instead of the action's checkout, once its
SHA-256 is the one pinned (:mod:`package`); it must be of the action's version.

It writes the step outputs ``python``, ``pythonpath`` and ``sys-path`` (the import path, as JSON,
that the publishing step uses with ``python -I -S`` so that nothing the repository's code planted
in site-packages afterwards, a ``.pth`` file or ``sitecustomize``, runs with the token).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

# distribution name -> the module it provides (for the "is it importable" test)
MODULES = {"pyyaml": "yaml", "pydantic": "pydantic", "junit-xml": "junit_xml", "requests": "requests",
           "pathspec": "pathspec"}


def _sibling(name: str) -> ModuleType:
    """A module next to this file: run as a script, before gpu-gate is importable, there is no package."""
    spec = importlib.util.spec_from_file_location(f"_gpu_gate_install_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def action_version(action: Path) -> str:
    text = (action / "gpu_gate" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        raise SystemExit(f"::error title=gpu-gate::no __version__ in {action}/gpu_gate/__init__.py")
    return match.group(1)


def requirements(action: Path) -> list[str]:
    import tomllib  # 3.11+: imported once the interpreter's version is known to be fine

    with open(action / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def _python(python: str, code: str, *args: str, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    """``python -P -c code``: -P keeps the working directory (the repository) off the import path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([python, "-P", "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def installed_version(python: str, pythonpath: str = "") -> str | None:
    res = _python(python, "import gpu_gate; print(gpu_gate.__version__)", pythonpath=pythonpath)
    return res.stdout.strip() if res.returncode == 0 else None


def missing(python: str, reqs: list[str], pythonpath: str = "") -> list[str]:
    """The requirements whose module PYTHON cannot import."""
    code = "import importlib.util, sys; print('\\n'.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    wanted = {MODULES.get(_name(r), _name(r).replace("-", "_")): r for r in reqs}
    res = _python(python, code, *wanted, pythonpath=pythonpath)
    if res.returncode != 0:
        raise SystemExit(f"::error title=gpu-gate::{python} failed: {res.stderr.strip()[-500:]}")
    return [wanted[m] for m in res.stdout.split()]


def copy_package(action: Path, site: Path) -> None:
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    shutil.copytree(action / "gpu_gate", site / "gpu_gate", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def install_deps(python: str, reqs: list[str], deps: Path) -> None:
    print(f"{python} lacks {', '.join(reqs)}: installing them into {deps} from the package index", flush=True)
    res = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--no-warn-script-location", "--no-cache-dir", "--target", str(deps), *reqs], timeout=900)
    if res.returncode != 0:
        raise SystemExit(f"::error title=gpu-gate::could not install {', '.join(reqs)} for {python}: bake them into "
                         "the runner image (runner/Dockerfile does) or give the runner access to a package index")


def import_path(python: str, pythonpath: str) -> list[str]:
    """PYTHON's sys.path, read now, before any repository code ran, with ``pythonpath`` and the folder
    that holds gpu-gate in front (an editable install finds it through a .pth hook, which -S skips)."""
    code = ("import json, os, sys, gpu_gate\n"
            "print(json.dumps([os.path.dirname(os.path.dirname(gpu_gate.__file__)), *sys.path]))")
    res = _python(python, code, pythonpath=pythonpath)
    if res.returncode != 0:
        raise SystemExit(f"::error title=gpu-gate::{python} failed: {res.stderr.strip()[-500:]}")
    front = [p for p in pythonpath.split(os.pathsep) if p]
    return front + [p for p in json.loads(res.stdout) if p and p not in front]


def install(python: str, action: Path | None, dest: Path, package: tuple[str, str] | None = None,
            workspace: Path | None = None) -> dict[str, str]:
    """Step outputs: python, pythonpath, sys-path. ``action`` None: use the gpu-gate PYTHON has.
    ``package``: (source, sha256) of a wheel or sdist to take the gpu_gate package from."""
    exe = _python(python, "import sys; print(sys.executable); sys.exit(sys.version_info < (3, 11))")
    if exe.returncode != 0:
        raise SystemExit(f"::error title=gpu-gate::{python} is not Python 3.11 or newer "
                         f"({(exe.stderr or exe.stdout).strip()[-300:]}): pass the action a `python:` that is")
    python = exe.stdout.strip()
    have = installed_version(python)
    if action is None and package is not None:
        raise SystemExit("::error title=gpu-gate::a package needs the action's checkout (its action.yml and version)")
    if action is None:
        if have is None:
            raise SystemExit(f"::error title=gpu-gate::{python} has no gpu-gate: pass gpu-gate-ref (the commit you "
                             "call the workflow at) so that it is checked out, or bake gpu-gate into the runner image")
        print(f"gpu-gate {have} is installed for {python}", flush=True)
        return {"python": python, "pythonpath": "", "sys-path": json.dumps(import_path(python, ""))}
    want = action_version(action)
    pythonpath = ""
    if have == want and package is None:
        print(f"gpu-gate {want} is already installed for {python}", flush=True)
    else:
        site = dest / "site"
        origin = "the action's checkout"
        if package is None:
            copy_package(action, site)
        else:
            origin = unpack_package(package, site, workspace or Path.cwd())
        pythonpath = str(site)
        lacking = missing(python, requirements(action))
        if lacking:
            install_deps(python, lacking, dest / "deps")
            pythonpath += os.pathsep + str(dest / "deps")
        got = installed_version(python, pythonpath)
        if package is not None and got is not None and got != want:
            raise SystemExit(f"::error title=gpu-gate::the package is gpu-gate {got}, the action is {want}: take the "
                             "action and the package from the same release")
        if got != want:
            raise SystemExit(f"::error title=gpu-gate::gpu-gate {want} copied to {site} does not import in {python}")
        print(f"gpu-gate {want} from {origin}, for {python} (PYTHONPATH {pythonpath})", flush=True)
    return {"python": python, "pythonpath": pythonpath,
            "sys-path": json.dumps(import_path(python, pythonpath), separators=(",", ":"))}


def unpack_package(package: tuple[str, str], site: Path, workspace: Path) -> str:
    """The gpu_gate package of the pinned wheel or sdist into ``site``; says where it came from."""
    artifact = _sibling("package")
    source, sha256 = package
    name, data = artifact.fetch(source, sha256, workspace)
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    count = artifact.unpack(name, data, site)
    print(f"{name}: SHA-256 {sha256.strip().lower()} as pinned; {count} files of its gpu_gate package", flush=True)
    return str(name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="install.py", description="gpu-gate for PYTHON, before any repository code")
    parser.add_argument("python")
    parser.add_argument("action", help="the action's checkout ('': use the gpu-gate PYTHON has)")
    parser.add_argument("dest", type=Path)
    parser.add_argument("--package", default="", help="a wheel or sdist of gpu-gate: URL, or path in the workspace")
    parser.add_argument("--sha256", default="", help="its SHA-256, required with --package")
    args = parser.parse_args(argv)
    if bool(args.package) != bool(args.sha256):
        raise SystemExit("::error title=gpu-gate::package and package-sha256 go together: pin the package's "
                         "SHA-256 (from the release's SHA256SUMS), or give neither")
    package = (args.package, args.sha256) if args.package else None
    outputs = install(args.python, Path(args.action) if args.action else None, args.dest, package)
    lines = "".join(f"{k}={v}\n" for k, v in outputs.items())
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(lines)
    else:
        sys.stdout.write(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
