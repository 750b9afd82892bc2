"""A local fake GitHub REST server that checks every request against GitHub's schema."""
from __future__ import annotations

from .server import FAULT_KINDS, FakeGitHub, Recorded, Violation

__all__ = ["FAULT_KINDS", "FakeGitHub", "Recorded", "Violation"]
