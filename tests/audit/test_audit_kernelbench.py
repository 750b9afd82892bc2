"""``gpu-gate audit`` on the KernelBench format: the bundled problems (examples/kernelbench) through the real
command, beside the benchmark's own verifier (one allclose at 1e-2 on ``get_inputs()``), which passes every
submission; and the probe that turns a problem into dims, on a problem whose sizes are tied in each way."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "examples" / "kernelbench"
VERIFIER = Path(__file__).with_name("benchmark_verifier.py")
# Fewer cases than the default, so the whole set runs in a few minutes under the Triton interpreter; the
# GPU-only checks off, as a CPU audit's policy says (in CI a check that could not run fails closed).
POLICY = ("checks:\n  equivalence:\n    cases: 16\n    growth: false\n    shrink_budget_s: 20\n"
          + "".join(f"  {c}: off\n" for c in ("determinism", "memcheck", "racecheck", "synccheck", "initcheck")))

# What each bundled submission is: correct, or the bug it hides at the benchmark's shapes and inputs.
EXPECTED = {
    "rms_norm/correct.py": ("green", set()),
    "rms_norm/no_weight.py": ("red", {"mismatch"}),  # ignores the weight: the problem initialises it to ones
    "rms_norm/block_mean.py": ("red", {"mismatch"}),  # divides by the block width: right at powers of two only
    "softmax/correct.py": ("green", set()),
    "softmax/chunked.py": ("red", {"nan"}),  # drops the tail shorter than a chunk: right at multiples of 1024 only
    "softmax/no_max.py": ("red", {"nan"}),  # no maximum subtracted: exp overflows beyond randn's range
}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_EVENT_PATH")}


def _gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_gate", *args], cwd=cwd, capture_output=True, text=True,
                          env=_env(), timeout=1800)


def _benchmark_says(problem: Path, submission: Path) -> str:
    r = subprocess.run([sys.executable, str(VERIFIER), str(problem), str(submission)], capture_output=True,
                       text=True, env={**_env(), "TRITON_INTERPRET": "1"}, timeout=600)
    return (r.stdout.strip().splitlines() or [r.stderr.strip()])[-1]


def test_bundled_problems_green_and_red_where_the_benchmark_passes_them_all(tmp_path: Path) -> None:
    subs = tmp_path / "submissions"
    subprocess.run(["cp", "-r", str(BUNDLED / "submissions"), str(subs)], check=True)
    (subs / "softmax" / "broken_import.py").write_text("import triton_kernels_that_do_not_exist\n")
    (subs / "layernorm_0.py").write_text("class ModelNew: pass\n")  # no problem of that name
    policy = tmp_path / "policy.yml"
    policy.write_text(POLICY)
    out = tmp_path / "audit"
    r = _gate("audit", "--problems", str(BUNDLED / "problems"), "--submissions", str(subs), "--out", str(out),
              "--policy", str(policy), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr  # red submissions: the policy is breached
    rows = {row["submission"]: row for row in json.loads((out / "audit.json").read_text())["submissions"]}

    table = []
    for name, (verdict, kinds) in EXPECTED.items():
        problem = BUNDLED / "problems" / f"{name.split('/')[0]}.py"
        benchmark = _benchmark_says(problem, BUNDLED / "submissions" / name)
        table.append(f"{name:24} benchmark: {benchmark:6} gpu-gate: {rows[name]['verdict']} {rows[name]['kinds']}")
        assert benchmark == "pass", name
        assert rows[name]["verdict"] == verdict, (name, rows[name])
        assert kinds <= set(rows[name]["kinds"]), (name, rows[name])
        if verdict == "red":
            assert rows[name]["case"] and rows[name]["repro"].startswith("cd "), rows[name]
    print("\n".join(table))

    assert rows["softmax/broken_import.py"]["verdict"] == "red"
    assert "spec-import-error" in rows["softmax/broken_import.py"]["kinds"] or rows["softmax/broken_import.py"]["kinds"]
    assert rows["layernorm_0.py"]["verdict"] == "error" and "matches no problem" in rows["layernorm_0.py"]["message"]
    assert rows["rms_norm/correct.py"]["backward"] == "not defined"  # forward only: no autograd Function

    md = (out / "audit.md").read_text()
    assert "2 green, 5 red, 1 not judged, of 8 submissions." in md
    suite = ET.parse(out / "audit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "8" and suite.get("failures") == "5" and suite.get("errors") == "1"
    for line in ("[1/8]", "[8/8]", "s in all"):
        assert line in r.stdout + r.stderr


def test_the_probe_finds_free_shared_and_constructor_sized_dims(tmp_path: Path) -> None:
    problem = tmp_path / "mm_norm.py"
    problem.write_text('''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.w = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, A, B, x):
        return A @ B, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def get_inputs():
    return [torch.randn(64, 64), torch.randn(64, 32), torch.randn(8, 64)]


def get_init_inputs():
    return [64, 1e-6]
''')
    sys.path.insert(0, str(ROOT))
    from gpu_gate.audit.kernelbench import probe, spec_text

    found = probe(problem)
    dims = {tuple(map(tuple, d["axes"])): d for d in found["dims"]}
    assert set(dims) == {((0, 0),), ((0, 1), (1, 0)), ((1, 1),), ((2, 0),), ((2, 1),)}
    assert dims[((0, 1), (1, 0))]["reduced"] and not dims[((0, 0),)]["reduced"]  # the matmul's inner size
    assert dims[((2, 1),)]["init"] == [0] and dims[((2, 1),)]["reduced"]  # the norm's hidden size, built anew
    assert not dims[((2, 0),)]["reduced"] and found["differentiable"]
    text = spec_text(found, "mm_norm")
    assert "'B': gg.Tensor(('A_1', 'B_1'), dtype=\"like:A\")" in text and "_TIED = {0: (2, 1)}" in text
    compile(text, "mm_norm_gate.py", "exec")


def test_a_problem_that_cannot_run_is_one_clear_line(tmp_path: Path) -> None:
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "bad.py").write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                     "        return x @ x\ndef get_inputs():\n    return [torch.randn(3, 4)]\n"
                                     "def get_init_inputs():\n    return []\n")
    subs = tmp_path / "subs" / "bad"
    subs.mkdir(parents=True)
    (subs / "mine.py").write_text("class ModelNew: pass\n")
    r = _gate("audit", "--problems", str(problems), "--submissions", str(subs.parent), "--out", str(tmp_path / "o"),
              cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr  # nothing could be judged
    row = json.loads((tmp_path / "o" / "audit.json").read_text())["submissions"][0]
    assert row["verdict"] == "error" and "the problem could not be probed" in row["message"]
    assert "Model fails on get_inputs() itself" in row["message"]
