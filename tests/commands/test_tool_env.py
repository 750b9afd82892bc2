"""Every external tool gpu-gate starts itself sees a scrubbed environment.

The attack: a policy names its own tool (``cuda: {sanitizer: tools/x}``), and gpu-gate runs
``tools/x --version`` (and ``--help``) in gpu-gate's own process, which on a GitHub runner may
hold a token. The tool here is a real script that writes out the environment it was given.
"""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpu_gate.store import dependencies
from gpu_gate.commands import doctor
from gpu_gate import git, proc
from gpu_gate.cuda import sanitizer as cs

SECRETS = {"GITHUB_TOKEN": "ghs_leak1", "GH_TOKEN": "ghs_leak2", "GG_TOKEN": "ghs_leak3",
           "ACTIONS_RUNTIME_TOKEN": "leak4", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "leak5", "INPUT_TOKEN": "leak6"}
TOOL = """#!/bin/sh
env > "$GG_TOOL_ENV_OUT.$$"
echo "NVIDIA (R) Compute Sanitizer"
echo "Version 2025.3.1"
"""


@pytest.fixture
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the tool, the prefix of its environment dumps), with secrets in gpu-gate's own environment."""
    path = tmp_path / "tools" / "x"
    path.parent.mkdir()
    path.write_text(TOOL)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    dumps = tmp_path / "env"
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GG_TOOL_ENV_OUT", str(dumps))  # a plain variable: it must still get through
    return path, dumps


def seen(dumps: Path) -> list[str]:
    files = sorted(dumps.parent.glob(dumps.name + ".*"))
    assert files, "the tool never ran: the test would prove nothing"
    return [f.read_text() for f in files]


def assert_scrubbed(dumps: Path) -> None:
    for text in seen(dumps):
        assert f"GG_TOOL_ENV_OUT={dumps}" in text, "the tool must get the ordinary environment"
        leaked = [name for name, value in SECRETS.items() if value in text or f"{name}=" in text]
        assert leaked == [], f"the tool saw {leaked}"


def test_a_policy_named_sanitizer_is_probed_with_a_scrubbed_environment(tool: tuple[Path, Path]) -> None:
    path, dumps = tool
    found = cs.locate(str(path))
    assert found is not None and found.version == "2025.3.1"
    assert len(seen(dumps)) == 2  # --version and --help
    assert_scrubbed(dumps)


def test_the_cache_fingerprint_probes_the_policy_sanitizer_with_a_scrubbed_environment(
        tool: tuple[Path, Path]) -> None:
    path, dumps = tool
    env = dependencies.environment_fingerprint(("0",), str(path))
    assert env["compute-sanitizer"] == "Version 2025.3.1"
    assert_scrubbed(dumps)


def test_doctor_version_probes_run_with_a_scrubbed_environment(tool: tuple[Path, Path]) -> None:
    path, dumps = tool
    info = doctor._binary_tool("compute-sanitizer", str(path), r"Version\s+(\S+)", doctor.Thresholds())
    assert info.version == "2025.3.1"
    assert_scrubbed(dumps)


def test_an_explicit_environment_is_passed_as_given(tool: tuple[Path, Path]) -> None:
    """The twin: a caller that builds its own environment gets exactly that (the executor scrubs its own)."""
    path, dumps = tool
    res = proc.run([str(path), "--version"], env={"GG_TOOL_ENV_OUT": str(dumps), "PATH": "/usr/bin:/bin",
                                                 "VISIBLE": "yes"})
    assert res.ok
    (text,) = seen(dumps)
    assert "VISIBLE=yes" in text and "GITHUB_TOKEN" not in text


def test_git_runs_without_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git reads the checkout; a token in its environment would reach any configured helper."""
    repo = tmp_path / "repo"
    repo.mkdir()
    hook = tmp_path / "editor.sh"
    dump = tmp_path / "git-env"
    hook.write_text(f"#!/bin/sh\nenv > {dump}\n")
    hook.chmod(0o755)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    git._run(repo, ["init", "-q"])
    git._run(repo, ["-c", f"alias.dump=!{hook}", "dump"])
    text = dump.read_text()
    assert "PATH=" in text and not [n for n in SECRETS if f"{n}=" in text]
