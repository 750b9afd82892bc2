"""``gpu-gate audit`` on the SOL-ExecBench format (definition, workloads, solutions as JSON): the bundled
RMSNorm definition through the real command, beside the benchmark's verifier (the workloads' sizes, randn,
norm weights set to ones, allclose at 1e-2), which passes every solution; and the solutions the audit
refuses to build, each with its one-line reason."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "examples" / "sol_execbench"
DEFINITION = BUNDLED / "definitions" / "rmsnorm_h1024.json"
WORKLOADS = BUNDLED / "workloads" / "rmsnorm_h1024.jsonl"
VERIFIER = Path(__file__).with_name("benchmark_verifier.py")
POLICY = ("checks:\n  equivalence:\n    cases: 16\n    growth: false\n    shrink_budget_s: 8\n"
          + "".join(f"  {c}: off\n" for c in ("determinism", "memcheck", "racecheck", "synccheck", "initcheck")))

EXPECTED = {
    "rmsnorm_h1024/correct.json": ("green", set()),
    "rmsnorm_h1024/correct_returning.json": ("green", set()),  # destination passing style off
    "rmsnorm_h1024/no_weight.json": ("red", {"mismatch"}),  # the benchmark sets the weight to ones
    "rmsnorm_h1024/four_rows.json": ("red", {"nan"}),  # the workloads' batch sizes are multiples of 4
}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_EVENT_PATH")}


def test_bundled_solutions_green_and_red_where_the_benchmark_passes_them_all(tmp_path: Path) -> None:
    subs = tmp_path / "solutions"
    shutil.copytree(BUNDLED / "solutions", subs)
    correct = json.loads((subs / "rmsnorm_h1024" / "correct.json").read_text())
    # A solution that ships its own copy of the reference module: refused, never built.
    forged = {**correct, "name": "forged", "sources": [*correct["sources"], {"path": "gg_reference.py",
              "content": "def run(hidden_states, weight, eps):\n    return hidden_states\n"}]}
    (subs / "rmsnorm_h1024" / "forged.json").write_text(json.dumps(forged))
    cuda = {**correct, "name": "cuda", "spec": {**correct["spec"], "language": "cuda", "entry_point": "k.cu::run"}}
    (subs / "rmsnorm_h1024" / "cuda.json").write_text(json.dumps(cuda))
    (subs / "other.json").write_text(json.dumps({**correct, "definition": "gemm_n4096_k4096"}))
    policy = tmp_path / "policy.yml"
    policy.write_text(POLICY)
    out = tmp_path / "audit"
    r = subprocess.run([sys.executable, "-m", "gpu_gate", "audit", "--problems", str(BUNDLED), "--submissions",
                        str(subs), "--out", str(out), "--policy", str(policy)], cwd=tmp_path, capture_output=True,
                       text=True, env=_env(), timeout=1800)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {row["submission"]: row for row in json.loads((out / "audit.json").read_text())["submissions"]}

    table = []
    v = subprocess.run([sys.executable, str(VERIFIER), "--sol", str(DEFINITION), str(WORKLOADS),
                        *(str(BUNDLED / "solutions" / name) for name in EXPECTED)], capture_output=True, text=True,
                       env={**_env(), "TRITON_INTERPRET": "1"}, timeout=900)
    said = v.stdout.strip().splitlines()
    assert len(said) == len(EXPECTED), v.stdout + v.stderr
    for (name, (verdict, kinds)), benchmark in zip(EXPECTED.items(), said):
        table.append(f"{name:40} benchmark: {benchmark:6} gpu-gate: {rows[name]['verdict']} {rows[name]['kinds']}")
        assert benchmark == "pass", name
        assert rows[name]["verdict"] == verdict and kinds <= set(rows[name]["kinds"]), (name, rows[name])
    print("\n".join(table))

    assert rows["rmsnorm_h1024/forged.json"]["verdict"] == "error"
    assert "would replace the audit's own files: gg_reference.py" in rows["rmsnorm_h1024/forged.json"]["message"]
    assert "a cuda solution" in rows["rmsnorm_h1024/cuda.json"]["message"]
    assert "'gemm_n4096_k4096' is not among the problems" in rows["other.json"]["message"]
    assert "2 green, 2 red, 3 not judged, of 7 submissions." in (out / "audit.md").read_text()


def test_the_spec_from_a_definition(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from gpu_gate.audit import sol

    defn = sol.load_json(DEFINITION)
    assert defn is not None and sol.is_definition(defn) and not sol.unsupported(defn)
    loads = sol.workloads(DEFINITION, "rmsnorm_h1024", BUNDLED)
    assert [w["axes"]["batch_size"] for w in loads] == [8, 32, 128, 256]
    reduced = sol.probe_reductions(DEFINITION, sol.probe_sizes(defn, loads), sol.scalars(defn, loads))
    assert reduced == {"batch_size": False, "hidden_size": True}
    solution = json.loads((BUNDLED / "solutions" / "rmsnorm_h1024" / "correct.json").read_text())
    text = sol.spec_text(defn, loads, reduced, solution)
    assert "'batch_size': gg.Dim(1, 512)" in text and "('batch_size', 1024)" in text and "'eps': 1e-06" in text
    compile(text, "gate.py", "exec")
    assert sol.unsupported({**defn, "inputs": {**defn["inputs"], "mask": {"shape": ["batch_size"], "dtype": "bool"}}})


def test_the_table_shows_each_submissions_time_against_the_reference(tmp_path: Path) -> None:
    """On a GPU each submission is timed against its problem's reference (the speed check, advisory unless
    the policy says otherwise): the table gives the ratio with its interval, and the implausible flag."""
    sys.path.insert(0, str(ROOT))
    from gpu_gate.commands import audit

    rows = [audit.Row("p", "fast.py", "green", speed={"ratio": 0.18, "low": 0.17, "high": 0.19}),
            audit.Row("p", "cached.py", "green", speed={"ratio": 0.01, "low": 0.009, "high": 0.012},
                      speed_flag="implausible-speedup"),
            audit.Row("p", "cpu.py", "green")]
    md = audit.markdown(rows).splitlines()
    header = [c.strip() for c in next(line for line in md if line.startswith("| problem")).split("|")]
    cells = {c[2]: c for c in ([x.strip() for x in line.split("|")] for line in md if line.startswith("| p "))}
    at = header.index("time / reference's")
    assert cells["fast.py"][at] == "0.18 (0.17-0.19)"
    assert cells["cached.py"][at] == "0.01 (0.009-0.012) **implausible-speedup**"
    assert cells["cpu.py"][at] == ""  # not timed (on the CPU): blank, never a figure
    gate = audit.Gate(problem="p", base={"a.py": "x = 1\n"}, head={"a.py": "x = 2\n"})
    audit.build_repo(tmp_path / "gpu", gate, "s.py", None, timed=True)
    assert "speed: advisory" in (tmp_path / "gpu" / ".gpu-gate.yml").read_text()
    audit.build_repo(tmp_path / "cpu", gate, "s.py", None)
    assert not (tmp_path / "cpu" / ".gpu-gate.yml").exists()  # on the CPU, the default preset: nothing timed
