"""``gpu-gate init``: a repository's first policy, a spec skeleton for one of its kernels, and
``.gpu-gate/`` in ``.gitignore``.

The kernels are found the way change detection finds them (gpu_gate.kernelscan for Python,
gpu_gate.cuda.names for CUDA C++), and existing specs the way ``plan`` finds them
(gpu_gate.discovery), so the skeleton goes to a kernel no spec covers yet. The skeleton fails
until its TODOs are filled in: a spec that passed before anyone wrote its reference would be a
green check that checked nothing. An existing file is never overwritten without ``--force``.
"""
from __future__ import annotations

import dataclasses
import json
import keyword
import posixpath
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import init_scan
from . import output as out
from .. import git, kernelscan, pythonpath
from ..changes import matcher
from ..cuda.names import cuda_kernel_names
from ..cudascan import is_c_source
from ..errors import GateError
from ..exitcodes import ExitCode
from .init_templates import CUDA_SPEC, POLICY, PYTHON_SPEC
from ..pyscan import ParseError

IGNORED = ".gpu-gate/"
POLICY_NAMES = (".gpu-gate.yml", ".gpu-gate.yaml")


@dataclasses.dataclass(frozen=True)
class FoundKernel:
    path: str  # repository-relative file
    name: str  # the first kernel defined in it
    line: int
    language: str
    names: tuple[str, ...] = ()  # every kernel defined in it


def run(repo: Path | None, *, specs_dir: str, kernel: str | None, force: bool) -> int:
    """``gpu-gate init`` in ``repo`` (None: the repository around the current directory)."""
    from .planning import repo_root

    return run_init(repo_root(repo), specs_dir=specs_dir, kernel=kernel, force=force)


def run_init(repo: Path, *, specs_dir: str, kernel: str | None, force: bool) -> int:
    specs_dir = _clean_dir(specs_dir)
    files = git.list_files(repo, None)
    if kernel is not None:  # that file alone is read: the rest of the repository only by path
        found = find_kernels(repo, [posixpath.normpath(kernel)])
        support = support_dirs_by_path(repo, files)
    else:
        found = find_kernels(repo, files)
        support = support_dirs(found)
    policy_text = starter_policy(specs_dir, support)
    _write(repo, ".gpu-gate.yml", policy_text, force, what="the starter policy",
           exists_as=[n for n in POLICY_NAMES if (repo / n).exists()])
    target = _pick(repo, found, kernel, support)
    if target is not None:
        rel = f"{specs_dir}/{_stem(target.path)}_gate.py"
        text, what = spec_skeleton(repo, target, rel)
        _write(repo, rel, text, force, what=f"{what}; fill in its TODOs")
        _check_found_by_policy(repo, rel)
    _ignore(repo)
    out.verdict(f"next: fill in the TODO(gpu-gate) lines{' in ' + rel if target else ''}, then run "
                f"`gpu-gate check --cpu{' --spec ' + rel if target else ''}`")
    return int(ExitCode.PASSED)


# --- finding kernels --------------------------------------------------------------------------

def find_kernels(repo: Path, paths: Sequence[str]) -> list[FoundKernel]:
    """The kernels of every kernel file among ``paths``, by path; files the default policy excludes
    (third_party/**) are left out, and so are files that name no GPU module at all (read as bytes)."""
    from ..policy import default_policy

    kernels = default_policy().kernels
    is_kernel_path = matcher(kernels.include, kernels.exclude)
    found = []
    for path in paths:
        if not is_kernel_path(path) or not (path.endswith(".py") or is_c_source(path)):
            continue
        try:
            source = (repo / path).read_bytes()
        except OSError:
            continue
        if not init_scan.may_hold_kernels(source):
            continue
        k = _kernels_of(path, source)
        if k is not None:
            found.append(k)
    return found


def _kernels_of(path: str, source: bytes) -> FoundKernel | None:
    if path.endswith(".py"):
        try:
            scan = kernelscan.scan(source, path)
        except ParseError:
            return None
        ks = sorted(scan.kernels, key=lambda k: k.line)
        return FoundKernel(path, ks[0].name, ks[0].line, ks[0].language, tuple(k.name for k in ks)) if ks else None
    names = cuda_kernel_names(source.decode("utf-8", errors="replace"))
    return FoundKernel(path, names[0].name, names[0].line, "cuda", tuple(n.name for n in names)) if names else None


# Directories whose kernels serve the library's tests, benchmarks, examples or docs: a change there is
# not a change to a kernel the library ships, so the starter policy leaves them out where it finds any.
SUPPORT_DIRS = ("tests", "test", "benchmarks", "benchmark", "bench", "examples", "example", "docs")


def support_dirs(found: list[FoundKernel]) -> list[str]:
    """``dir/**`` for each directory of ``SUPPORT_DIRS`` (the outermost on each path) that holds a
    kernel file found, in path order."""
    out: list[str] = []
    for k in found:
        parts = k.path.split("/")[:-1]
        at = next((i for i, part in enumerate(parts) if part.lower() in SUPPORT_DIRS), None)
        if at is not None:
            glob = "/".join(parts[:at + 1]) + "/**"
            if glob not in out:
                out.append(glob)
    return out


def support_dirs_by_path(repo: Path, files: Sequence[str]) -> list[str]:
    """``support_dirs`` without scanning: each directory of ``SUPPORT_DIRS`` that holds a Python or C
    file naming a GPU module (read as bytes, not parsed)."""
    from ..policy import default_policy

    kernels = default_policy().kernels
    is_kernel_path = matcher(kernels.include, kernels.exclude)
    maybe = []
    for path in files:
        parts = path.split("/")[:-1]
        if not any(part.lower() in SUPPORT_DIRS for part in parts) or not is_kernel_path(path):
            continue
        if not (path.endswith(".py") or is_c_source(path)):
            continue
        try:
            if init_scan.may_hold_kernels((repo / path).read_bytes()):
                maybe.append(FoundKernel(path, "", 0, ""))
        except OSError:
            continue
    return support_dirs(maybe)


def _rank(repo: Path, k: FoundKernel) -> tuple[int, int, int, str]:
    """The kernel a new user most likely wants a spec for first: one of the library's own Python
    packages (a directory with ``__init__.py``) before a C source, before a loose script; Triton
    first within each; then the shallower path (the package's own ops before its backends)."""
    if k.path.endswith(".py"):
        tier = 0 if (repo / posixpath.dirname(k.path) / "__init__.py").is_file() else 2
    else:
        tier = 1
    return tier, 0 if k.language == "triton" else 1, k.path.count("/"), k.path


def _pick(repo: Path, found: list[FoundKernel], wanted: str | None,
          support: Sequence[str] = ()) -> FoundKernel | None:
    if wanted is not None:
        rel = posixpath.normpath(wanted)
        match = next((k for k in found if k.path == rel), None)
        if match is None:
            raise GateError(f"--kernel {wanted}: no kernel found in that file",
                            hint="give a repository-relative .py or .cu file that defines a GPU kernel")
        return match
    if not found:
        out.say("no kernel found in this repository: no spec skeleton written (docs/specs.md shows how to write one)")
        return None
    covered = _covered(repo, found)
    aside = matcher(list(support), [])
    todo = sorted((k for k in found if k.path not in covered and not aside(k.path)), key=lambda k: _rank(repo, k))
    if not todo:
        out.say(f"every kernel file found ({len(found)}) is covered by a gate spec: no spec skeleton written")
        return None
    if support:
        out.say(f"the starter policy leaves out the kernels of {', '.join(support)}: a change there is not a change "
                f"to a kernel the library ships")
    shipped = [k for k in found if not aside(k.path)]
    if len(shipped) > 1:
        out.say(f"{len(shipped)} kernel files found, {len(todo)} not covered by a spec; the entry points that reach "
                f"their kernels, and where each kernel is launched:")
        for line in init_scan.candidates(repo, todo, limit=CANDIDATES_SHOWN):
            out.say(f"  {line}")
        out.say(f"writing a skeleton for {todo[0].path} (choose another with --kernel PATH)")
    return todo[0]


CANDIDATES_SHOWN = 200  # one short line each: a library's every kernel file


def _covered(repo: Path, found: list[FoundKernel]) -> set[str]:
    from ..discovery import discover
    from ..policy import load_policy

    specs = discover(repo, None, load_policy(repo).policy).specs
    return {k.path for k in found if any(s.covers_path(k.path) for s in specs)}


# --- what is written --------------------------------------------------------------------------

def starter_policy(specs_dir: str, support: Sequence[str] = ()) -> str:
    """The starter policy, proven valid by the loader that will read it (strict: no unknown key);
    ``support``: globs of the directories whose kernels it leaves out (see ``support_dirs``)."""
    from ..policy import load_policy

    excludes = json.dumps(["third_party/**", *support])
    note = ("  # tests, benchmarks and examples: not kernels the library ships" if support else "")
    text = POLICY.format(specs_glob=f"{specs_dir}/**/*_gate.py", excludes=excludes, excludes_note=note)
    with tempfile.TemporaryDirectory(prefix="gpu-gate-init-") as tmp:
        (Path(tmp) / ".gpu-gate.yml").write_text(text)
        load_policy(Path(tmp), Path(tmp) / ".gpu-gate.yml", strict=True)  # a PolicyError here is gpu-gate's bug
    return text


def spec_skeleton(repo: Path, k: FoundKernel, spec_path: str) -> tuple[str, str]:
    """The skeleton's text, and what it is for the message: a spec for the kernel file's best entry
    point where one reaches its kernels (see init_entry), else one that names the kernel."""
    name = _identifier(k.name)
    values = {"path": k.path, "kernel": k.name, "line": k.line, "language": k.language, "spec": spec_path,
              "func": f"{name}_gate"}
    plain = f"a spec skeleton for {k.name} ({k.path}:{k.line})"
    if k.language == "cuda":
        return CUDA_SPEC.format(**values), plain
    module = module_name(repo, k.path)
    entry = init_scan.entry_skeleton(repo, k, module, spec_path, f"{_stem(k.path)}_gate")
    if entry is not None:
        return entry
    return PYTHON_SPEC.format(**values, module=module), plain


def module_name(repo: Path, path: str) -> str:
    """The import name of ``path``, from the directories the gate puts on sys.path (pyproject's
    package directories, then the root: gpu_gate.pythonpath)."""
    pyproject = repo / "pyproject.toml"
    roots = pythonpath.python_path(pyproject.read_bytes() if pyproject.is_file() else None, None)
    for root in roots:
        prefix = f"{root}/" if root else ""
        if path.startswith(prefix):
            parts = path[len(prefix):].removesuffix(".py").split("/")
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return path.removesuffix(".py").replace("/", ".")


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name).strip("_") or "kernel"
    return f"{ident}_" if keyword.iskeyword(ident) or ident[0].isdigit() else ident


def _stem(path: str) -> str:
    stem = posixpath.splitext(posixpath.basename(path))[0]
    if stem == "__init__":
        stem = posixpath.basename(posixpath.dirname(path)) or "kernels"
    return _identifier(stem)


def _clean_dir(specs_dir: str) -> str:
    d = posixpath.normpath(specs_dir.strip().replace("\\", "/")).strip("/")
    if d in ("", ".") or d.startswith("..") or any(c in d for c in "*?[]"):
        raise GateError(f"--specs-dir {specs_dir!r}: not a directory inside the repository",
                        hint="give a relative path such as gate or tests/gate")
    return d


def _write(repo: Path, rel: str, text: str, force: bool, *, what: str, exists_as: list[str] | None = None) -> None:
    present = exists_as if exists_as is not None else ([rel] if (repo / rel).exists() else [])
    if present and not force:
        out.say(f"kept {present[0]}: it exists (--force overwrites it)")
        return
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    out.say(f"{'overwrote' if present else 'wrote'} {rel}: {what}")


def _check_found_by_policy(repo: Path, rel: str) -> None:
    """The policy in the repository (kept or new) must list the skeleton among its specs."""
    from ..changes import match
    from ..policy import load_policy

    globs = load_policy(repo).policy.specs
    if not any(match(rel, g) for g in globs):
        out.warn(f"gpu-gate: warning: {rel} is not matched by the policy's specs globs ({', '.join(globs)}): plan "
                 f"will not find it (add its directory under `specs:` in .gpu-gate.yml)")


def _ignore(repo: Path) -> None:
    """Add ``.gpu-gate/`` (reports, cache) to .gitignore, once; create the file if needed."""
    import pathspec

    path = repo / ".gitignore"
    text = path.read_text() if path.is_file() else ""
    # git's own reading of the file (wildcards, negations, the last match wins), through pathspec
    if pathspec.GitIgnoreSpec.from_lines(text.splitlines()).match_file(".gpu-gate/out/report.md"):
        out.say(f"kept .gitignore: it already ignores {IGNORED}")
        return
    sep = "" if not text or text.endswith("\n") else "\n"
    path.write_text(f"{text}{sep}# gpu-gate's reports and result cache\n{IGNORED}\n")
    out.say(f"{'added' if text else 'wrote .gitignore with'} {IGNORED}" + (" to .gitignore" if text else ""))
