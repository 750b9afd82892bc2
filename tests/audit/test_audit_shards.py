"""``gpu-gate audit`` over a matrix of runners: ``--shard I/N`` audits every N-th submission, ``--merge``
joins the shards' tables into one; ``--format json`` puts the table's JSON alone on stdout; and a
submission whose audit breaks in gpu-gate itself costs its own row only."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "examples" / "kernelbench"


def _gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_EVENT_PATH")}
    return subprocess.run([sys.executable, "-m", "gpu_gate", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def test_shards_cover_every_submission_once_and_merge_into_one_table(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    names = [f"layernorm_{i}.py" for i in range(5)]  # no problem of that name: each is a row, cheaply
    for n in names:
        (subs / n).write_text("class ModelNew: pass\n")
    seen: list[str] = []
    for i in (1, 2):
        r = _gate("audit", "--problems", str(BUNDLED / "problems"), "--submissions", str(subs), "--out",
                  str(tmp_path / f"shard{i}"), "--shard", f"{i}/2", "--format", "json", cwd=tmp_path)
        assert r.returncode == 3, r.stdout + r.stderr  # nothing could be judged
        table = json.loads(r.stdout)  # stdout is the JSON alone; progress went to stderr
        seen += [row["submission"] for row in table["submissions"]]
        assert f"shard {i}/2: {3 if i == 1 else 2} of 5 submissions" in r.stderr
    assert sorted(seen) == names  # each submission in exactly one shard
    r = _gate("audit", "--merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out",
              str(tmp_path / "all"), cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    merged = json.loads((tmp_path / "all" / "audit.json").read_text())["submissions"]
    assert [row["submission"] for row in merged] == names
    assert "0 green, 0 red, 5 not judged, of 5 submissions." in (tmp_path / "all" / "audit.md").read_text()
    # The same shard twice is refused: a submission would be counted twice.
    r = _gate("audit", "--merge", str(tmp_path / "shard1"), str(tmp_path / "shard1"), "--out",
              str(tmp_path / "twice"), cwd=tmp_path)
    assert r.returncode != 0 and "in two shards' tables" in r.stderr


def test_a_submission_that_breaks_the_audit_costs_its_own_row_only(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from gpu_gate.commands import audit

    subs = tmp_path / "subs" / "softmax"
    subs.mkdir(parents=True)
    for n in ("first.py", "second.py"):
        (subs / n).write_text((BUNDLED / "submissions" / "softmax" / "correct.py").read_text())
    calls: list[list[str]] = []

    def check(argv: list[str]) -> int:  # the first gate breaks inside gpu-gate; the second writes nothing
        calls.append(argv)
        if len(calls) == 1:
            raise RuntimeError("a bug in gpu-gate")
        return 3

    code = audit.run(BUNDLED / "problems", subs.parent, tmp_path / "out", check, cpu=True)
    rows = {r["submission"]: r for r in json.loads((tmp_path / "out" / "audit.json").read_text())["submissions"]}
    assert len(calls) == 2 and code == 3
    assert rows["softmax/first.py"]["verdict"] == "error"
    assert "internal error in gpu-gate while auditing softmax/first.py: RuntimeError: a bug in gpu-gate" in \
        rows["softmax/first.py"]["message"]
    assert rows["softmax/second.py"]["verdict"] == "error"
    assert "wrote no results" in rows["softmax/second.py"]["message"]
