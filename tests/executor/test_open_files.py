"""The gate raises its soft limit on open files (inherited by its judges and workers) towards the
hard limit: the descriptors of large tensors in flight between workers and judges are bounded by the
sender's limit, and a runner's login default (1024) is shared by every job on it."""
from __future__ import annotations

import subprocess
import sys


def test_a_low_soft_limit_is_raised_within_the_hard_one() -> None:
    code = """
import resource
from gpu_gate.executor.scheduling import OPEN_FILES, raise_open_files
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
got = raise_open_files()
now = resource.getrlimit(resource.RLIMIT_NOFILE)
want = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
print(got == want == now[0], now[1] == hard)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.split() == ["True", "True"], (p.stdout, p.stderr)


def test_a_higher_soft_limit_is_kept() -> None:
    code = """
import resource
from gpu_gate.executor.scheduling import OPEN_FILES, raise_open_files
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard == resource.RLIM_INFINITY or hard > OPEN_FILES:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES + 1, hard))
    print(raise_open_files() == OPEN_FILES + 1 == resource.getrlimit(resource.RLIMIT_NOFILE)[0])
else:
    print(raise_open_files() == hard)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "True", (p.stdout, p.stderr)
