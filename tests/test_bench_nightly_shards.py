"""bench/bench_nightly_shards.py: the nightly's makespan over runners, simulated from measured job times."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_more_runners_shorten_the_nightly_and_a_shard_count_is_named() -> None:
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_nightly_shards.py"), "--specs", "40",
                        "--runners", "1,2,4", "--overhead-s", "30"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if re.match(r"\| \d+ \|", line)]
    spans = [float(line.split("|")[2].split()[0]) for line in rows]
    assert len(rows) == 3 and spans[0] > spans[1] > spans[2], p.stdout
    # one runner runs every job: 40 specs' 6 jobs each and 20 compile jobs
    assert p.stdout.startswith("40 specs, 260 jobs"), p.stdout
    assert re.search(r"shards to use: [124] ", p.stdout), p.stdout
