"""``gpu-gate vendor DIR``: a copy of the GitHub action inside the user's own repository.

A workflow then runs it as ``uses: $/DIR`` with no gpu-gate repository to fork, no release and no
package index. The copy holds what the action runs and nothing else: ``action.yml``, the
``gpu_gate`` package (which the action's install step copies for the runner's interpreter),
``pyproject.toml`` (its dependencies), and ``LICENSE`` and ``NOTICE``, which Apache-2.0 asks a
redistributed copy to carry. ``VENDORED.json`` records the version, where the copy came from and the
SHA-256 of every file, so that ``gpu-gate vendor --check DIR`` can tell a reviewer whether the copy
is exactly what gpu-gate shipped.

The files come from a checkout of gpu-gate (an editable install: they sit next to the package) or
from an installed wheel, whose build puts them in ``gpu_gate/_action/`` (setup.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from .. import __version__
from ..errors import GateError
from ..exitcodes import ExitCode
from . import output as out

ACTION_FILES = ("action.yml", "pyproject.toml", "LICENSE", "NOTICE")
MANIFEST = "VENDORED.json"
PACKAGE = "gpu_gate"
# Not part of what the action runs: bytecode, the wheel's own copy of ACTION_FILES, and the demo's
# repository, whose specs and Triton kernels would read as the user's own.
_SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "_action", "demo_repo")


@dataclasses.dataclass(frozen=True)
class Source:
    """Where the files come from: ``root`` holds ACTION_FILES, ``package`` is the gpu_gate package."""

    root: Path
    package: Path
    described: str  # for VENDORED.json and the output: "a checkout of gpu-gate at 1a2b3c..."


def find_source(package: Path | None = None) -> Source:
    """The installed gpu-gate's own files: from a checkout around the package, else from the wheel."""
    package = package or Path(__file__).resolve().parents[1]
    checkout = package.parent
    if all((checkout / name).is_file() for name in ACTION_FILES) and _is_gpu_gate(checkout / "pyproject.toml"):
        commit = _commit(checkout)
        return Source(checkout, package, "a checkout of gpu-gate" + (f" at {commit}" if commit else ""))
    bundled = package / "_action"
    if all((bundled / name).is_file() for name in ACTION_FILES):
        return Source(bundled, package, f"the installed wheel of gpu-gate {__version__}")
    raise GateError(f"this gpu-gate ({package}) carries no action.yml to vendor",
                    hint="run `gpu-gate vendor` from a checkout of gpu-gate, or from gpu-gate installed from its wheel")


def _is_gpu_gate(pyproject: Path) -> bool:
    import tomllib

    try:
        return bool(tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name") == "gpu-kernel-gate")
    except (OSError, tomllib.TOMLDecodeError):
        return False


def _commit(checkout: Path) -> str | None:
    """The checkout's commit, when it is a git work tree with nothing uncommitted under what is copied."""
    from .. import proc

    head = proc.run(["git", "rev-parse", "HEAD"], cwd=checkout, timeout=30)
    if not head.ok:
        return None
    dirty = proc.run(["git", "status", "--porcelain", "--", *ACTION_FILES, PACKAGE], cwd=checkout, timeout=30)
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def _files(root: Path) -> dict[str, str]:
    """Every file under ``root`` but the manifest, as {relative path: sha256}."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel != MANIFEST and "__pycache__" not in path.parts:
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def vendor(dest: Path, source: Source) -> dict[str, str]:
    """Copy the action into ``dest`` (new, empty, or an earlier vendored copy, which is replaced)."""
    if dest.exists() and not dest.is_dir():
        raise GateError(f"{dest}: exists and is not a directory", hint="choose another directory")
    if dest.resolve().is_relative_to(source.package.resolve()):
        raise GateError(f"{dest}: inside the gpu_gate package it would copy", hint="vendor into your own repository")
    if dest.is_dir() and any(dest.iterdir()):
        if not (dest / MANIFEST).is_file():
            raise GateError(f"{dest}: not empty, and not a copy that `gpu-gate vendor` made (no {MANIFEST})",
                            hint="choose a new directory, e.g. .github/actions/gpu-gate")
        shutil.rmtree(dest)  # an earlier copy: replaced whole, so that files gone from gpu-gate go too
    dest.mkdir(parents=True, exist_ok=True)
    for name in ACTION_FILES:
        shutil.copyfile(source.root / name, dest / name)
    shutil.copytree(source.package, dest / PACKAGE, ignore=_SKIPPED)
    files = _files(dest)
    manifest = {"gpu_gate": __version__, "source": source.described, "files": files}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return files


def check(dest: Path) -> list[str]:
    """What differs from the manifest: files changed, added or missing. Empty: the copy is intact."""
    try:
        manifest = json.loads((dest / MANIFEST).read_text(encoding="utf-8"))
        recorded = dict(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GateError(f"{dest / MANIFEST}: no manifest of a vendored copy ({exc})",
                        hint="vendor it with `gpu-gate vendor DIR`") from exc
    found = _files(dest)
    problems = [f"changed: {p}" for p in sorted(recorded) if p in found and found[p] != recorded[p]]
    problems += [f"missing: {p}" for p in sorted(set(recorded) - set(found))]
    problems += [f"added: {p}" for p in sorted(set(found) - set(recorded))]
    return problems


def snippet(uses: str) -> str:
    """The steps of a workflow job that runs the vendored action. ``$/`` is GitHub's syntax for an action
    of the workflow's own repository at the workflow's commit: read from the repository, not from the
    checkout, which no earlier step can then change it in (``./`` works too, and under act)."""
    return f"""      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
        with:
          fetch-depth: 0           # the three-dot diff needs the merge base
          persist-credentials: false
      - id: gate
        uses: {uses}  # gpu-gate {__version__}, vendored"""


def kernel_files_in_copy(dest: Path) -> tuple[str, list[str]]:
    """(the copy's directory, its files that the repository's policy reads as kernel files), both
    repository-relative: a pull request that updates such a copy would read as one that changes kernels."""
    from .. import git
    from ..changes import matcher
    from ..policy import load_policy

    try:
        root = git.repo_root(dest)
        policy = load_policy(root).policy
    except GateError:
        return "", []
    is_kernel = matcher(policy.kernels.include, policy.kernels.exclude)
    rel = Path(os.path.relpath(dest.resolve(), root.resolve())).as_posix()
    return rel, [f"{rel}/{p}" for p in _files(dest) if is_kernel(f"{rel}/{p}")]


def _uses(dest: Path) -> str:
    """``./path`` of ``dest`` from the root of the git repository around it (where a workflow runs)."""
    from .. import git
    from ..errors import GitError

    try:
        root = git.repo_root(dest)
    except GitError:
        root = Path.cwd()
    try:
        rel = Path(os.path.relpath(dest.resolve(), root.resolve())).as_posix()
    except ValueError:
        rel = dest.as_posix()
    return "$/" + rel if not rel.startswith("../") else dest.as_posix()


def run_vendor(dest: Path, *, check_only: bool = False) -> int:
    if check_only:
        problems = check(dest)
        for problem in problems:
            out.error(f"{dest}: {problem}")
        version = json.loads((dest / MANIFEST).read_text(encoding="utf-8")).get("gpu_gate", "?")
        out.verdict(f"{dest}: gpu-gate {version}, " + (f"{len(problems)} file(s) differ from the vendored copy"
                                                       if problems else "intact"))
        return int(ExitCode.POLICY_BREACHED if problems else ExitCode.PASSED)
    source = find_source()
    files = vendor(dest, source)
    out.verdict(f"vendored gpu-gate {__version__} into {dest} ({len(files)} files, from {source.described})")
    out.say(f"\nCommit {dest}, then run it from a job on your GPU runner (`./` instead of `$/` for act or a GitHub "
            f"Enterprise Server without `$/`):\n\n{snippet(_uses(dest))}\n")
    where, seen = kernel_files_in_copy(dest)
    if seen:
        out.warn(f"your policy's kernels.include reaches {len(seen)} file(s) of the copy (e.g. {seen[0]}), and "
                 f"gpu-gate's own modules that drive Triton would read as changed kernel files: add \"{where}/**\" "
                 f"to kernels.exclude in .gpu-gate.yml, in a pull request of its own before this one (the base's "
                 f"policy decides)")
    out.say(f"A pull request that changes {dest} is judged by its own copy: have your code owners review every "
            f"change under it (docs/guide/install.md). `gpu-gate vendor --check {dest}` says whether the copy is "
            f"exactly the one vendored.")
    return int(ExitCode.PASSED)
