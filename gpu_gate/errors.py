"""Domain errors. Each is caught once, by the CLI, and printed as one line."""
from __future__ import annotations

from .exitcodes import ExitCode


class GateError(Exception):
    """An error the user can fix. ``str(err)`` is the whole one-line message."""

    exit_code: ExitCode = ExitCode.USAGE_ERROR

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if not hint else f"{message} ({hint})")


class PolicyError(GateError):
    """A policy file is malformed; the message starts with ``path:line:col:``."""


class GitError(GateError):
    """A git query failed in a way the user can fix (missing ref, no merge base, ...)."""


class SpecError(GateError):
    """A gate spec is declared wrongly (raised while the spec module is imported)."""
