"""Finding, loading and validating a repository's `.gpu-gate.yml`."""
from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from ..errors import PolicyError
from ..exitcodes import ExitCode
from .diagnostics import Diagnosis, diagnose
from .extends import PRESETS_DIR, load_merged, preset_path
from .models import Policy

POLICY_NAMES = (".gpu-gate.yml", ".gpu-gate.yaml")
DEFAULT_SOURCE = "default preset"


@dataclasses.dataclass(frozen=True)
class LoadedPolicy:
    policy: Policy
    source: str  # the file, relative to the repository root when inside it, or "default preset"
    warnings: tuple[str, ...] = ()
    is_default: bool = False
    path: Path | None = None

    @property
    def banner(self) -> str:
        """What the CLI says about where its policy came from."""
        if self.is_default:
            return f"no {POLICY_NAMES[0]} found: using the default preset"
        return f"policy: {self.source}"


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
    display = _Display(repo_root)
    diagnosis = _diagnose(path, display, strict)
    if diagnosis.policy is None:
        raise PolicyError("\n".join(diagnosis.errors))
    return LoadedPolicy(diagnosis.policy, display(path), tuple(warnings) + diagnosis.warnings, path=path)


def validate_policy_file(path: Path, *, strict: bool) -> tuple[int, list[str]]:
    """For `gpu-gate validate-policy`: the exit code and the lines to print."""
    display = _Display(Path.cwd())
    try:
        diagnosis = _diagnose(path, display, strict)
    except PolicyError as err:
        return int(ExitCode.USAGE_ERROR), str(err).splitlines()
    lines = list(diagnosis.warnings)
    if diagnosis.policy is None:
        return int(ExitCode.USAGE_ERROR), lines + list(diagnosis.errors)
    enabled = ", ".join(f"{name} ({check.level})" for name, check in diagnosis.policy.enabled_checks())
    return int(ExitCode.PASSED), lines + [f"{display(path)}: valid; checks: {enabled or 'none'}"]


@functools.cache
def default_policy() -> Policy:
    """The policy that applies when a repository has no policy file."""
    diagnosis = _diagnose(preset_path("default"), _Display(PRESETS_DIR), strict=True)
    if diagnosis.policy is None:  # a broken preset is gpu-gate's bug, not the user's
        raise RuntimeError("the default preset is invalid: " + "; ".join(diagnosis.errors))
    return diagnosis.policy


def _diagnose(path: Path, display: _Display, strict: bool) -> Diagnosis:
    return diagnose(load_merged(path, display), strict=strict)


def _find(repo_root: Path, warnings: list[str]) -> Path | None:
    found = [repo_root / name for name in POLICY_NAMES if (repo_root / name).is_file()]
    if len(found) > 1:
        warnings.append(f"{POLICY_NAMES[1]}: warning: ignored, because {POLICY_NAMES[0]} exists (delete one of them)")
    return found[0] if found else None


class _Display:
    """Shows a path relative to ``base`` when it lies inside it, else as given."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def __call__(self, path: Path) -> str:
        # Unresolved first, so a policy reached through a symlink keeps the name the user gave it.
        for resolve in (os.path.abspath, os.path.realpath):
            try:
                return Path(resolve(path)).relative_to(resolve(self.base)).as_posix()
            except ValueError:
                continue
        return str(path)
