"""Shared test configuration. GPU tests live in tests/gpu and skip cleanly without a GPU."""
from __future__ import annotations

from conftest_git import GitRepo, git_env, make_repo, repo  # noqa: F401 - fixtures for every test module
