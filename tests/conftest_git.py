"""Fixtures that build real git repositories with pinned identities and dates."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

PINNED = {
    "GIT_AUTHOR_NAME": "Gate Tester",
    "GIT_AUTHOR_EMAIL": "tester@example.com",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Gate Tester",
    "GIT_COMMITTER_EMAIL": "tester@example.com",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
}


class GitRepo:
    """A throw-away repository: write files, commit, branch; every call is real git."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def git(self, *args: str) -> str:
        res = subprocess.run(["git", *args], cwd=self.path, capture_output=True, check=False)
        if res.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {res.stderr.decode()}")
        return res.stdout.decode().strip()

    def write(self, rel: str, content: str | bytes) -> Path:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
        return p

    def commit(self, message: str = "change", files: dict[str, str | bytes] | None = None) -> str:
        for rel, content in (files or {}).items():
            self.write(rel, content)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def branch(self, name: str, start: str = "HEAD") -> None:
        self.git("checkout", "-q", "-b", name, start)

    def checkout(self, ref: str) -> None:
        self.git("checkout", "-q", ref)


@pytest.fixture
def git_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Pin identities and dates and keep the user's git configuration out."""
    for k, v in PINNED.items():
        monkeypatch.setenv(k, v)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(k, raising=False)
    yield


@pytest.fixture
def make_repo(git_env: None, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Factory: ``make_repo("name")`` -> a fresh GitRepo on branch main with one commit."""
    def make(name: str = "repo", initial: dict[str, str | bytes] | None = None) -> GitRepo:
        path = tmp_path / name
        path.mkdir()
        repo = GitRepo(path)
        repo.git("init", "-q", "-b", "main")
        repo.commit("initial", initial or {"README.md": "hello\n"})
        return repo
    return make


@pytest.fixture
def repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    return make_repo()
