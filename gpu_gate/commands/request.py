"""What a command was asked to do, as frozen records: the command line is parsed into these
(gpu_gate.cli) and nothing past the parser reads the parsed arguments themselves."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..policy import Policy


@dataclasses.dataclass(frozen=True)
class PolicyFile:
    """``--policy`` and ``--strict``: a policy file in force instead of the base's, and whether
    unknown keys are errors."""

    path: Path | None = None
    strict: bool = False


@dataclasses.dataclass(frozen=True)
class CacheChoice:
    """``--no-cache`` and ``--cache-dir``: whether, and where, results and recorded launches are kept."""

    enabled: bool = True
    dir: str | None = None

    def directory(self, policy: Policy, repo: Path) -> Path | None:
        """The cache directory in use, or None (no cache)."""
        if not self.enabled or not policy.cache.enabled:
            return None
        return Path(self.dir) if self.dir else repo / policy.cache.dir


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    """What to plan: the refs and the snapshot of the repository to compare (a commit, the work tree
    or the index), the policy, and which specs run. Nothing here has been read yet."""

    repo: Path | None = None  # None: the repository around the current directory
    base: str | None = None  # None: the GitHub event's base
    head: str | None = None  # None: the GitHub event's head, else the work tree
    staged: bool = False  # HEAD against the index (what `git commit` would record)
    every_spec: bool = False  # --all: every spec in the repository runs
    only: tuple[str, ...] = ()  # --spec globs
    policy: PolicyFile = PolicyFile()
    cache: CacheChoice = CacheChoice()


@dataclasses.dataclass(frozen=True)
class Publishing:
    """Where the verdict goes besides the report directory: GitHub (the PR comment and check run)."""

    github: bool = False
    comment_mode: str = "sticky"
    pr: int | None = None
    sha: str | None = None


@dataclasses.dataclass(frozen=True)
class ReportOutput:
    """Where the reports are written, whether stdout carries the JSON answer, and what is published."""

    out: Path
    json: bool = False
    publishing: Publishing = Publishing()
