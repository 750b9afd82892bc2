"""Process exit codes: one enum, used by every command."""
from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    PASSED = 0
    POLICY_BREACHED = 1
    USAGE_ERROR = 2  # bad command line or bad configuration
    INTERNAL_ERROR = 3
