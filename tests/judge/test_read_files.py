"""What the kernel reads is part of the change (a JSON tuning table, as vLLM's fused MoE configs).

The candidate's worker records every repository file the code under review opens; a run keeps
that record with the spec's launches. A later change to such a file selects the spec (a pull
request that changes only the table is not "no kernel changes"), and the result cache checks its
bytes (the old PASS is never served for a new table). Real git repositories, the CLI, on the CPU.
"""
from __future__ import annotations

import json

from conftest_git import GitRepo
from test_cli import gate
from test_differential import POLICY, SPEC, KERNEL

# A row sum in chunks whose size and tail handling come from a tuning table read at import.
OPS = """\
import json
from pathlib import Path

import torch

CONF = json.loads((Path(__file__).parent / "configs" / "rows.json").read_text())


def row_sum(x):
    acc = torch.zeros(x.shape[:-1], dtype=torch.float64)
    n, c = x.shape[-1], CONF["chunk"]
    stop = n if CONF["masked"] else n - n % c
    for j in range(0, stop, c):
        acc = acc + x[..., j:min(j + c, stop)].double().sum(-1)
    return acc.to(x.dtype)
"""
GOOD_TABLE = json.dumps({"chunk": 32, "masked": True}) + "\n"
RETUNED = json.dumps({"chunk": 64, "masked": True}) + "\n"  # a correct change: another chunk size
UNMASKED = json.dumps({"chunk": 64, "masked": False}) + "\n"  # drops the tail of every row


def _repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gitignore": ".gpu-gate/\n", ".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/ops.py": OPS,
                           "mylib/configs/rows.json": GOOD_TABLE, "csrc/rows.cu": KERNEL,
                           "gate/rows_gate.py": SPEC})
    # the nightly run on the default branch: it records what the spec read
    p = gate("check", "--all", "--cpu", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    r.branch("feature")
    return r


def _check(r: GitRepo) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p.returncode, p.stdout + p.stderr, results


def _equivalence(results: dict) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in results.get("results", []) if r["check"] == "equivalence"]


def test_a_change_to_the_table_alone_runs_the_spec_that_read_it(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.commit("retune", {"mylib/configs/rows.json": UNMASKED})
    code, text, results = _check(r)
    assert "no kernel changes" not in text
    assert code == 1, text
    runs = _equivalence(results)
    assert [x["status"] for x in runs] == ["failed"], text
    assert any(f["kind"] == "mismatch" and f["details"].get("change") == "new" for f in runs[0]["findings"]), text
    assert "read mylib/configs/rows.json when it last ran, modified" in text


def test_a_correct_retuning_is_run_and_green(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.commit("retune", {"mylib/configs/rows.json": RETUNED})
    code, text, results = _check(r)
    assert code == 0, text
    runs = _equivalence(results)
    assert [x["status"] for x in runs] == ["passed"], text
    assert runs[0]["cached_from"] is None  # run on the new table, not served from the nightly's entry
    assert "mylib/configs/rows.json" in runs[0]["extra"]["launches"]["reads"]


def test_the_cache_does_not_serve_the_old_tables_pass(make_repo) -> None:  # type: ignore[no-untyped-def]
    """A Python change selects the spec; its PASS is cached; a later commit changes the table only."""
    r = _repo(make_repo)
    r.commit("a token", {"mylib/ops.py": OPS.replace("acc = acc + ", "acc = acc + 0 + ")})
    code, text, _ = _check(r)
    assert code == 0, text
    r.commit("retune", {"mylib/configs/rows.json": UNMASKED})
    code, text, results = _check(r)
    assert code == 1, text
    runs = _equivalence(results)
    assert [(x["status"], x["cached_from"]) for x in runs] == [("failed", None)], text
