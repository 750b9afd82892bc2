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
POLICY = ("checks:\n  equivalence:\n    cases: 16\n    growth: false\n    shrink_budget_s: 8\n"
          + "".join(f"  {c}: off\n" for c in ("determinism", "memcheck", "racecheck", "synccheck", "initcheck")))

# What each bundled submission is: correct, or the bug it hides at the benchmark's shapes and inputs.
EXPECTED = {
    "cross_entropy/correct.py": ("green", set()),
    "cross_entropy/no_max.py": ("red", {"nan"}),  # exp overflows beyond randn's range of logits
    "embedding_rms_norm/correct.py": ("green", set()),
    # sums a frequent token's gradients in bfloat16: randint's uniform ids repeat a token a few times only
    "embedding_rms_norm/table_dtype_accumulate.py": ("red", {"mismatch"}),
    "rms_norm/correct.py": ("green", set()),
    "rms_norm/with_backward.py": ("green", set()),
    "rms_norm/no_weight.py": ("red", {"mismatch"}),  # ignores the weight: the problem initialises it to ones
    "rms_norm/block_mean.py": ("red", {"mismatch"}),  # divides by the block width: right at powers of two only
    "rms_norm/backward_no_weight.py": ("red", {"mismatch"}),  # the forward is right; the benchmark checks no more
    # the forward and the input's gradient are right; the weight's gradient is not (gpu-gate's parameter grads)
    "rms_norm/backward_dw_unnormalised.py": ("red", {"mismatch"}),
    "softmax/correct.py": ("green", set()),
    "softmax/chunked.py": ("red", {"nan"}),  # drops the tail shorter than a chunk: right at multiples of 1024 only
    "softmax/no_max.py": ("red", {"nan"}),  # no maximum subtracted: exp overflows beyond randn's range
}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_EVENT_PATH")}


def _gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_gate", *args], cwd=cwd, capture_output=True, text=True,
                          env=_env(), timeout=1800)


def _benchmark_says(pairs: list[tuple[Path, Path]]) -> list[str]:
    """The benchmark's verifier on each (problem, submission), in one process of its own."""
    r = subprocess.run([sys.executable, str(VERIFIER), *(str(p) for pair in pairs for p in pair)],
                       capture_output=True, text=True, env={**_env(), "TRITON_INTERPRET": "1"}, timeout=900)
    said = r.stdout.strip().splitlines()
    assert len(said) == len(pairs), r.stdout + r.stderr
    return said


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
    said = _benchmark_says([(BUNDLED / "problems" / f"{name.split('/')[0]}.py", BUNDLED / "submissions" / name)
                            for name in EXPECTED])
    for (name, (verdict, kinds)), benchmark in zip(EXPECTED.items(), said):
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
    assert rows["rms_norm/with_backward.py"]["backward"] == "checked"
    assert rows["embedding_rms_norm/table_dtype_accumulate.py"]["backward"] == "checked"
    dw = rows["rms_norm/backward_dw_unnormalised.py"]
    assert "param_grad:weight" in json.dumps(dw), dw  # the weight's gradient is what is wrong

    md = (out / "audit.md").read_text()
    assert "5 green, 9 red, 1 not judged, of 15 submissions." in md
    suite = ET.parse(out / "audit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "15" and suite.get("failures") == "9" and suite.get("errors") == "1"
    for line in ("[1/15]", "[15/15]", "s in all"):
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


def test_the_probe_bounds_an_index_by_the_axis_the_model_checks_it_against(tmp_path: Path) -> None:
    """Labels below the number of classes, token ids below the vocabulary: the spec draws them below that dim
    at every size it tries (so that they can point at the hot logit), not below the largest value seen."""
    sys.path.insert(0, str(ROOT))
    from gpu_gate.audit.kernelbench import probe, spec_text

    found = probe(BUNDLED / "problems" / "cross_entropy.py")
    labels = found["inputs"][1]
    assert labels["kind"] == "index" and labels["bound"] == [0, 1]
    assert {tuple(map(tuple, d["axes"])): d["lo"] for d in found["dims"]}[((0, 1),)] == 1  # classes shrink too
    assert "'targets': gg.Index(('predictions_0',), high='predictions_1'" in spec_text(found, "cross_entropy")
    found = probe(BUNDLED / "problems" / "embedding_rms_norm.py")
    assert found["inputs"][0]["bound"] == [1, 0]  # ids below the table's rows
    assert [d["reduced"] for d in found["dims"]] == [False, False, True]  # the norm's hidden size, through ids

    # An index the model clamps has no bound: the largest value seen stays its bound.
    problem = tmp_path / "clamped.py"
    problem.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x, i):\n"
                       "        return x[i.clamp(max=x.shape[0] - 1)]\n"
                       "def get_inputs():\n    return [torch.randn(16, 4), torch.randint(0, 16, (8,))]\n"
                       "def get_init_inputs():\n    return []\n")
    assert probe(problem)["inputs"][1]["bound"] is None
