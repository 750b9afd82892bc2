"""A token that actions/checkout persisted in the checkout is found, wherever git config keeps it."""
from __future__ import annotations

import subprocess
from pathlib import Path

from gpu_gate.github.credentials import credentials_in_checkout, warnings

HEADER = "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA=="  # x-access-token:ghs_secret


def repo(tmp_path: Path) -> Path:
    path = tmp_path / "checkout"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "remote", "add", "origin", "https://github.com/octo/kernels"], check=True)
    return path


def config(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "config", *args], check=True)


def test_persist_credentials_false_leaves_nothing(tmp_path: Path) -> None:
    assert credentials_in_checkout(repo(tmp_path)) == [] and warnings(repo(tmp_path / "b")) == []


def test_the_extraheader_actions_checkout_writes_is_found_and_never_echoed(tmp_path: Path) -> None:
    r = repo(tmp_path)
    config(r, "--local", "http.https://github.com/.extraheader", HEADER)
    (found,) = credentials_in_checkout(r)
    assert found == ".git/config: http.https://github.com/.extraheader"
    (warning,) = warnings(r)
    assert "persist-credentials: false" in warning and "eC1h" not in warning


def test_a_credential_in_an_included_file_is_found(tmp_path: Path) -> None:
    """Newer actions/checkout releases keep the header in a separate file that .git/config includes."""
    r = repo(tmp_path)
    creds = tmp_path / "git-credentials-1234.config"
    creds.write_text(f'[http "https://github.com/"]\n\textraheader = {HEADER}\n')
    config(r, "--local", f"includeIf.gitdir:{r}/.git.path", str(creds))
    assert credentials_in_checkout(r) == [f"{creds}: http.https://github.com/.extraheader"]


def test_a_token_in_the_remote_url_is_found(tmp_path: Path) -> None:
    r = repo(tmp_path)
    config(r, "remote.origin.url", "https://x-access-token:ghs_secret@github.com/octo/kernels")
    assert credentials_in_checkout(r) == [".git/config: remote.origin.url (a password or token in the URL)"]


def test_not_a_repository_is_not_an_error(tmp_path: Path) -> None:
    assert credentials_in_checkout(tmp_path) == []
