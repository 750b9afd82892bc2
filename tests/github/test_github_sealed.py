"""A step that runs the repository's code starts afresh without tokens: nothing in /proc/*/environ.

Deleting a variable inside a running process leaves it in ``/proc/<pid>/environ``; the sealed
runner execs the command with a new environment, so the process that runs has none to show.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import os, sys
own = open('/proc/self/environ', 'rb').read().decode()
print('LEAK' if 'ghs_sealed_secret' in own else 'CLEAN')
print('PATH0=' + os.environ['PATH'].split(os.pathsep)[0])
print('PLAIN=' + os.environ.get('PLAIN_SETTING', ''))
print('FILES=' + ','.join(n for n in ('GITHUB_ENV', 'GITHUB_PATH', 'GITHUB_OUTPUT') if n in os.environ))
"""


def run_sealed(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GITHUB_TOKEN": "ghs_sealed_secret", "GG_TOKEN": "ghs_sealed_secret",
           "ACTIONS_RUNTIME_TOKEN": "ghs_sealed_secret", "PLAIN_SETTING": "kept",
           "GITHUB_ENV": "/tmp/set_env", "GITHUB_PATH": "/tmp/add_path", "GITHUB_OUTPUT": "/tmp/out"}
    return subprocess.run([sys.executable, "-m", "gpu_gate.github.sealed", *argv], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_command_runs_with_no_token_in_its_proc_environ() -> None:
    res = run_sealed(sys.executable, "-c", PROBE)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "CLEAN" in lines and "PLAIN=kept" in lines
    assert "FILES=" in lines, "setup code must not be pointed at the files that change later steps' env and PATH"
    assert f"PATH0={Path(sys.executable).parent}" in lines, "python and pip in a setup command mean gpu-gate's"
    warning = next(line for line in lines if line.startswith("::warning title=gpu-gate::removed "))
    assert all(name in warning for name in ("ACTIONS_RUNTIME_TOKEN", "GG_TOKEN", "GITHUB_TOKEN"))
    assert "ghs_sealed_secret" not in res.stdout


def test_deleting_a_variable_in_process_is_not_enough() -> None:
    """The attack the sealed runner exists for: os.environ.pop leaves the token in /proc/self/environ."""
    code = "import os\nos.environ.pop('GITHUB_TOKEN')\n" + PROBE
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, "GITHUB_TOKEN": "ghs_sealed_secret"},
                         capture_output=True, text=True, timeout=60)
    assert "LEAK" in res.stdout.splitlines()


def test_a_shell_script_runs_sealed_and_its_exit_code_comes_back() -> None:
    res = run_sealed("bash", "-c", 'test -z "${GITHUB_TOKEN:-}" && exit 7')
    assert res.returncode == 7


def test_a_missing_command_is_one_clear_line() -> None:
    res = run_sealed("no-such-command-gg")
    assert res.returncode == 127 and "::error title=gpu-gate::cannot run no-such-command-gg" in res.stdout
