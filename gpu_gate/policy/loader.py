"""Finding, loading and validating a repository's `.gpu-gate.yml`."""
from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from ..errors import PolicyError
from ..exitcodes import ExitCode
from .diagnostics import diagnose
from .extends import PRESETS_DIR, load_merged
from .models import Policy
from .tree import FileTree, PolicyTree, PresetTree

POLICY_NAMES = (".gpu-gate.yml", ".gpu-gate.yaml")
DEFAULT_SOURCE = "default preset"


@dataclasses.dataclass(frozen=True)
class LoadedPolicy:
    policy: Policy
    source: str  # the file, relative to the repository root when inside it, or "default preset"
    warnings: tuple[str, ...] = ()
    is_default: bool = False
    path: Path | None = None
    note: str = ""  # why this policy is the one in force (shown in the banner)
    looked_for: str = POLICY_NAMES[0]  # the file whose absence made this the default preset

    @property
    def banner(self) -> str:
        """What the CLI says about where its policy came from."""
        if self.is_default:
            return f"no {self.looked_for} found: using the default preset" + (f" ({self.note})" if self.note else "")
        return f"policy: {self.source}" + (f" ({self.note})" if self.note else "")


def load_policy(repo_root: Path, path: Path | None = None, *, strict: bool = False) -> LoadedPolicy:
    """Load ``path`` (relative paths are taken from the current directory, like any command-line path),
    else ``repo_root/.gpu-gate.yml`` or ``.gpu-gate.yaml``, else the default preset.

    Raises PolicyError with one `path:line:col: what (hint)` line per error.
    """
    warnings: list[str] = []
    if path is None:
        path = _find(repo_root, warnings)
        if path is None:
            return LoadedPolicy(default_policy(), DEFAULT_SOURCE, (), is_default=True)
    tree, rel = _on_disk(path, repo_root, repo_root)
    loaded = load_from(tree, rel, strict=strict)
    return dataclasses.replace(loaded, warnings=tuple(warnings) + loaded.warnings, path=path)


def load_from(tree: PolicyTree, rel: str, *, strict: bool = False) -> LoadedPolicy:
    """Load ``rel`` from ``tree`` (a directory or a git revision); its `extends:` stay inside that tree."""
    diagnosis = diagnose(load_merged(tree, rel), strict=strict)
    if diagnosis.policy is None:
        raise PolicyError("\n".join(diagnosis.errors))
    return LoadedPolicy(diagnosis.policy, tree.display(rel), diagnosis.warnings)


def find_in(tree: PolicyTree) -> tuple[str | None, tuple[str, ...]]:
    """The policy file of a tree (`.gpu-gate.yml`, else `.gpu-gate.yaml`) and a warning when both exist."""
    found = [name for name in POLICY_NAMES if tree.exists(name)]
    warnings = (f"{POLICY_NAMES[1]}: warning: ignored, because {POLICY_NAMES[0]} exists (delete one of them)",) \
        if len(found) > 1 else ()
    return (found[0] if found else None), warnings


def validate_policy_file(path: Path, *, strict: bool) -> tuple[int, list[str]]:
    """For `gpu-gate validate-policy`: the exit code and the lines to print."""
    tree, rel = _on_disk(path, _enclosing_checkout(path), Path.cwd())
    return validate_in(tree, rel, strict=strict)


def validate_in(tree: PolicyTree, rel: str, *, strict: bool) -> tuple[int, list[str]]:
    """As :func:`validate_policy_file`, for ``rel`` in any tree (a directory or a git revision)."""
    try:
        diagnosis = diagnose(load_merged(tree, rel), strict=strict)
    except PolicyError as err:
        return int(ExitCode.USAGE_ERROR), str(err).splitlines()
    lines = list(diagnosis.warnings)
    if diagnosis.policy is None:
        return int(ExitCode.USAGE_ERROR), lines + list(diagnosis.errors)
    enabled = ", ".join(f"{name} ({check.level})" for name, check in diagnosis.policy.enabled_checks())
    return int(ExitCode.PASSED), lines + [f"{tree.display(rel)}: valid; checks: {enabled or 'none'}"]


@functools.cache
def default_policy() -> Policy:
    """The policy that applies when a repository has no policy file."""
    diagnosis = diagnose(load_merged(PresetTree(PRESETS_DIR), "default.yml"), strict=True)
    if diagnosis.policy is None:  # a broken preset is gpu-gate's bug, not the user's
        raise RuntimeError("the default preset is invalid: " + "; ".join(diagnosis.errors))
    return diagnosis.policy


def _on_disk(path: Path, root: Path, shown_from: Path) -> tuple[FileTree, str]:
    """A file on disk as (tree, name): inside ``root`` its `extends:` may reach all of ``root``; a file
    elsewhere (given on the command line) is a tree of its own directory."""
    full = Path(os.path.abspath(path))
    for base in (root, Path(os.path.realpath(root))):
        try:
            rel = full.relative_to(os.path.abspath(base)).as_posix()
        except ValueError:
            continue
        if rel != ".":
            return FileTree(base, shown_from), rel
    return FileTree(full.parent, shown_from), full.name


def _enclosing_checkout(path: Path) -> Path:
    """The git work tree around ``path`` (found on disk, without running git), else its directory."""
    start = Path(os.path.abspath(path)).parent
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def _find(repo_root: Path, warnings: list[str]) -> Path | None:
    found = [repo_root / name for name in POLICY_NAMES if (repo_root / name).is_file()]
    if len(found) > 1:
        warnings.append(f"{POLICY_NAMES[1]}: warning: ignored, because {POLICY_NAMES[0]} exists (delete one of them)")
    return found[0] if found else None
