"""Importing a spec module in a worker: in isolation, from the base's source where the job carries
it, with the repository's packages on sys.path as the user's own tests see them. The stand-in import
(:mod:`.stubs`) makes the same spec importable without running any of the repository's code."""
from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from ..protocol.jobs import Job
from ..protocol.messages import SpecImportFacts
from . import distribution

if TYPE_CHECKING:
    from ..spec import Spec


class SpecImportError(Exception):
    """The spec did not import, or names no such spec: the facts, which the judge turns into its finding."""

    def __init__(self, facts: SpecImportFacts) -> None:
        super().__init__(facts.message)
        self.facts = facts


def _module_name(rel: str) -> str:
    stem = rel[:-3] if rel.endswith(".py") else rel
    # a neutral name: the kernels the spec imports must not learn from it that a gate loaded them
    return "_spec_" + "".join(c if c.isalnum() else "_" for c in stem)


_ROOTS: set[str] = set()


def _forget_other_roots(root: str) -> None:
    """In one process (tests, or a caller that runs jobs in-process), specs of another repository
    must not see its packages: ``kernels`` imported from there would shadow this one's."""
    for other in _ROOTS - {root}:
        prefix = other.rstrip(os.sep) + os.sep
        for name, mod in list(sys.modules.items()):
            if (getattr(mod, "__file__", None) or "").startswith(prefix):
                del sys.modules[name]
        sys.path[:] = [p for p in sys.path if p != other and not p.startswith(prefix)]
    _ROOTS.clear()
    _ROOTS.add(root)


def load_spec(job: Job, repo_root: Path, workdir: Path, *, stub_repository: bool = False,
              truth_root: Path | None = None) -> Spec:
    """Import the spec module in isolation and return the named spec. A spec that exists at the base is
    loaded from the base's source (gpu_gate.protocol.jobs.base_copy); the head's file judges only when it
    cannot. ``truth_root``: the base's tree the reference worker computes the truth from (see
    gpu_gate.protocol.jobs.truth_commit): the spec is that tree's file, and the repository's modules it
    imports, at once or later, are that tree's; the head's tree is not on sys.path at all."""
    from ..protocol.jobs import base_copy, carried

    assert job.spec is not None
    if truth_root is not None:
        spec = carried(job)
        path = truth_root / str(spec.get("file") if spec else job.spec.file)
        if path.is_file():
            # the base's file holds the base's name (a spec paired across a rename, gpu_gate.rules.pairing)
            name = str(spec.get("name") or job.spec.name) if spec else job.spec.name
            return _load_spec_file(job, truth_root, path, stub_repository, name)
        repo_root = truth_root
    base = base_copy(job, workdir)
    path = base if base is not None else repo_root / job.spec.file
    # a spec paired across a rename (gpu_gate.rules.pairing) has the base's name in the base's source
    name = str((carried(job) or {}).get("name") or job.spec.name) if base is not None else job.spec.name
    return _load_spec_file(job, repo_root, path, stub_repository, name)


def _load_spec_file(job: Job, repo_root: Path, path: Path, stub_repository: bool, spec_name: str) -> Spec:
    from . import launches
    from ..spec import specs_in_module
    from . import disguise, stubs

    assert job.spec is not None
    root = str(repo_root)
    _forget_other_roots(root)
    # The user's packages import as they do in their own tests: from the policy's python_path
    # (a src/ layout's package directory), then the root.
    user_path(repo_root, job.python_path)
    name = _module_name(job.spec.file)
    finder = stubs.install([root, *user_roots(repo_root, job.python_path)], keep=[name]) if stub_repository else None
    try:
        spec_obj = importlib.util.spec_from_file_location(name, path)
        if spec_obj is None or spec_obj.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec_obj)
        own = disguise.spec_builtins()
        if own is not None:  # its ``import gpu_gate`` answered without that name in sys.modules
            module.__builtins__ = own  # type: ignore[attr-defined]
        sys.modules[name] = module
        spec_obj.loader.exec_module(module)
        if finder is None:
            launches.ensure_hooked()
    except BaseException as exc:  # noqa: BLE001 - user code: any failure is a finding
        if finder is not None:
            stubs.uninstall(finder)
        if isinstance(exc, KeyboardInterrupt) or finder is not None:
            raise
        tb = traceback.format_exc()
        line = _user_line(tb, job.spec.file)
        raise SpecImportError(SpecImportFacts(
            kind="spec-import-error", file=job.spec.file, line=line,
            message=f"{job.spec.file}:{line or 1}: the spec does not import: {type(exc).__name__}: {exc} "
                    f"({_import_hint(exc, job)})",
            traceback=tb, missing_module=exc.name if isinstance(exc, ModuleNotFoundError) and exc.name else "")) from exc
    found = [s for s in specs_in_module(name) if s.name == spec_name]
    if not found:
        names = [s.name for s in specs_in_module(name)]
        raise SpecImportError(SpecImportFacts(
            kind="spec-not-found", file=job.spec.file, line=None,
            message=f"{job.spec.file}: no gate spec named {spec_name!r} (found: {', '.join(names) or 'none'}; "
                    f"decorate the function with @gg.spec)"))
    return found[0]


def _import_hint(exc: BaseException, job: Job) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name in _EXTRAS:
        return (f"the interpreter that runs the specs lacks {exc.name}: install gpu-gate's `{_EXTRAS[exc.name]}` extra "
                f"there, or `gpu-cu13`/`gpu-cu12` with the CUDA build of torch on a GPU runner")
    if isinstance(exc, ModuleNotFoundError):
        where = ", ".join(repr(p or ".") for p in job.python_path)
        return (f"specs import the repository's packages from python_path [{where}]: if the package lives "
                f"elsewhere, e.g. in src/, set `python_path: [src]` in .gpu-gate.yml; if it is a dependency, "
                f"install it on the runner")
    assert job.spec is not None
    return f"fix the spec module; run `python {job.spec.file}` to see the error"


# The modules one of gpu-gate's extras brings (gpu_gate.extras says the same to the command line).
_EXTRAS = {"torch": "cpu", "triton": "triton"}


# What the judging side imports from site-packages: imported before the repository is on
# sys.path, so that a repository file of the same name (``torch.py``) cannot stand in for it.
_JUDGE_IMPORTS = ("torch", "numpy")


def user_path(repo_root: Path, python_path: tuple[str, ...] = ("",)) -> None:
    """Put the repository (and the entries of $PYTHONPATH, which ``python -I`` ignores) on
    sys.path so the user's packages import as in their own tests, but behind the standard
    library: a repository ``json.py`` never replaces the stdlib's. They go ahead of
    site-packages, so the pull request's own package wins over an installed copy of it, and
    torch and numpy are imported first, so that a repository ``torch.py`` finds them taken.
    ``gpu_gate`` itself was imported before any of this. ``python_path``: the policy's
    repository-relative directories, in order ("" is the root)."""
    for name in _JUDGE_IMPORTS:
        try:
            __import__(name)
        except ImportError:
            pass
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    wanted = [str(repo_root / rel) if rel else str(repo_root) for rel in (python_path or ("",))]
    wanted += [str((repo_root / p).resolve()) for p in extra]
    at = _first_site_index()
    for entry in wanted:
        if entry not in sys.path:
            sys.path.insert(at, entry)
            at += 1
    distribution.answer_for(repo_root)  # its own metadata, where the tree is not installed


def user_roots(repo_root: Path, python_path: tuple[str, ...]) -> list[str]:
    return [str(repo_root / rel) if rel else str(repo_root) for rel in (python_path or ("",))]


def _first_site_index() -> int:
    """Where site-packages begin on sys.path (its end where there are none)."""
    import site
    import sysconfig

    sites = {os.path.realpath(p) for p in (*site.getsitepackages(), sysconfig.get_paths()["purelib"],
                                           sysconfig.get_paths()["platlib"])}
    for i, entry in enumerate(sys.path):
        if os.path.realpath(entry or ".") in sites or "site-packages" in entry or "dist-packages" in entry:
            return i
    return len(sys.path)


def _user_line(tb: str, rel: str) -> int | None:
    line = None
    for text in tb.splitlines():
        text = text.strip()
        if text.startswith("File ") and rel.replace(os.sep, "/") in text.replace(os.sep, "/"):
            try:
                line = int(text.split(", line ")[1].split(",")[0])
            except (IndexError, ValueError):
                pass
    return line
