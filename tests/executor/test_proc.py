"""The one subprocess helper: exit codes, timeouts that kill the group, bounded output, scrubbing."""
from __future__ import annotations

import os
import sys
import time

from gpu_gate import proc


def test_captures_exit_code_and_streams() -> None:
    r = proc.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (r.returncode, r.stdout.strip(), r.stderr.strip()) == (3, "out", "err")
    assert r.describe().startswith("exit code 3: ")


def test_missing_executable_is_a_result_not_an_exception() -> None:
    r = proc.run(["gpu-gate-no-such-tool-xyz", "--version"])
    assert r.not_found and r.returncode is None
    assert r.describe().startswith("`gpu-gate-no-such-tool-xyz` not found")


def test_timeout_kills_the_whole_process_group(tmp_path) -> None:
    marker = tmp_path / "grandchild-alive"
    # The child starts a grandchild that would write a marker after 3 s; both must die at the timeout.
    code = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
            f"\"import time, pathlib; time.sleep(3); pathlib.Path({str(marker)!r}).write_text('x')\"]); "
            f"time.sleep(60)")
    start = time.monotonic()
    r = proc.run([sys.executable, "-c", code], timeout=1.0)
    assert r.timed_out and r.returncode is None
    assert time.monotonic() - start < 10
    time.sleep(3.5)
    assert not marker.exists()
    assert r.describe().startswith("timed out after 1s")


def test_megabytes_of_stderr_are_bounded_head_and_tail() -> None:
    code = "import sys; sys.stderr.write('HEAD\\n' + 'x' * (8 << 20) + '\\nTAIL\\n')"
    r = proc.run([sys.executable, "-c", code], timeout=60)
    assert r.returncode == 0
    assert len(r.stderr) < proc.MAX_CAPTURE + 200
    assert r.stderr.startswith("HEAD") and r.stderr.rstrip().endswith("TAIL")
    assert "bytes cut" in r.stderr


def test_signal_is_reported_by_name() -> None:
    r = proc.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    assert r.signal == 11
    assert r.describe().startswith("killed by SIGSEGV")


def test_scrubbed_env_drops_tokens_secrets_and_actions_internals() -> None:
    base = {"GITHUB_TOKEN": "t", "ACTIONS_RUNTIME_TOKEN": "t", "ACTIONS_ID_TOKEN_REQUEST_URL": "u",
            "MY_API_KEY": "k", "AWS_SECRET_ACCESS_KEY": "s", "NPM_AUTH": "a", "DB_PASSWORD": "p",
            "PATH": os.environ.get("PATH", ""), "HOME": "/home/x", "CUDA_HOME": "/usr/local/cuda",
            "KEYBOARD_LAYOUT": "us"}
    env = proc.scrubbed_env(base, extra={"GPU_GATE_REPO_ROOT": "."})
    assert set(env) == {"PATH", "HOME", "CUDA_HOME", "KEYBOARD_LAYOUT", "GPU_GATE_REPO_ROOT"}
