"""End to end on a GPU: `gpu-gate check` on a repository of raw CUDA kernels, every check on.

The executor wraps the harness in compute-sanitizer, the harness runs the spec's cases with
the pools off, and the XML becomes findings. Each planted bug has a clean twin that must pass.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
checks:
  compile: {archs: [sm_90]}
  equivalence: {cases: 12, growth: false}
  determinism: {repeats: 4}
  memcheck: required
  racecheck: required
  synccheck: required
  initcheck: advisory
runner: {jobs_per_gpu: 4, job_timeout_minutes: 8}
cache: {enabled: false}
"""

SCALE = """\
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""

SCALE_TAIL = """\
extern "C" __global__ void scale_tail(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 2.0f * x[i];  // no bounds check: the last block runs past n
}
"""

REVERSE_RACE = """\
extern "C" __global__ void reverse_race(const float* x, float* y, int n) {
    __shared__ float tile[256];
    int base = blockIdx.x * 256;
    int t = threadIdx.x;
    tile[t] = (base + t < n) ? x[base + t] : 0.0f;
    // missing __syncthreads(): other warps' elements may not be written yet
    int src = 255 - t;
    if (base + t < n && base + src < n) y[base + t] = tile[src];
    else if (base + t < n) y[base + t] = 0.0f;
}
"""

SPEC = """\
import torch
import gpu_gate as gg

@gg.spec(dims={{"n": gg.Dim(1, 5000)}}, inputs={{"x": gg.Tensor(("n",), dtypes=["float32"])}},
         reference={reference}, covers=["csrc/{file}.cu"], devices=("cuda",))
def {name}_gate(x):
    k = gg.cuda.load("csrc/{file}.cu", "{name}")
    x = x.contiguous()
    y = gg.empty_like(x)
    n = x.numel()
    k(((n + 255) // 256,), (256,), x, y, gg.cuda.int32(n))
    return y
"""


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=repo, env=env, check=True, capture_output=True)


def _feature_repo(repo: Path, policy: str) -> Path:
    """A repository holding only ``policy`` on main, checked out on a new branch `feature`."""
    repo.mkdir(exist_ok=True)
    (repo / ".gpu-gate.yml").write_text(policy)
    # as `gpu-gate init` writes it: the reports are no part of the work tree the gate checks
    (repo / ".gitignore").write_text(".gpu-gate/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "checkout", "-qb", "feature")
    (repo / "csrc").mkdir()
    (repo / "gate").mkdir()
    return repo


@pytest.fixture(scope="module")
def gate_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    repo = _feature_repo(tmp_path_factory.mktemp("gpu-gate-e2e"), POLICY)
    for name, src in (("scale", SCALE), ("scale_tail", SCALE_TAIL), ("reverse_race", REVERSE_RACE)):
        (repo / f"csrc/{name}.cu").write_text(src)
    (repo / "gate/scale_gate.py").write_text(SPEC.format(name="scale", file="scale", reference="lambda x: 2 * x"))
    (repo / "gate/scale_tail_gate.py").write_text(
        SPEC.format(name="scale_tail", file="scale_tail", reference="lambda x: 2 * x"))
    spec = SPEC.format(name="reverse_race", file="reverse_race", reference="_reverse")
    spec = spec.replace("import gpu_gate as gg\n", "import gpu_gate as gg\n\n"
                        "def _reverse(x):\n"
                        "    out = []\n"
                        "    for c in x.split(256):\n"
                        "        m = c.numel()\n"
                        "        if m == 256:\n"
                        "            out.append(c.flip(0))\n"
                        "        else:  # partial block: a thread whose mirror lies past n writes 0\n"
                        "            full = torch.cat([c, c.new_zeros(256 - m)]).flip(0)[:m]\n"
                        "            out.append(full)\n"
                        "    return torch.cat(out)\n")
    (repo / "gate/reverse_race_gate.py").write_text(spec)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "kernels")
    out = repo / "out"
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--base", "main", "--out", str(out),
                        "--keep-job-dirs"], cwd=repo, capture_output=True, text=True, timeout=900)
    save = os.environ.get("GPU_GATE_FIXTURE_OUT")
    if save:
        Path(save).mkdir(parents=True, exist_ok=True)
        (Path(save) / "e2e-stdout.txt").write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
    assert p.returncode == 1, p.stdout + p.stderr  # the planted bugs must block
    results = json.loads((out / "results.json").read_text())["results"]
    return {r["job_id"]: r for r in results}


def _kinds(r: dict) -> set[str]:
    return {f["kind"] for f in r["findings"] if f["severity"] == "error"}


def test_clean_kernel_passes_every_check(gate_run: dict[str, dict]) -> None:
    for check in ("equivalence", "determinism", "memcheck", "racecheck", "synccheck", "initcheck"):
        r = gate_run[f"{check}:gate/scale_gate.py::scale_gate"]
        assert r["status"] == "passed", (check, r["reason"], r["findings"])
    assert gate_run["compile:csrc/scale.cu"]["status"] == "passed"


def test_tail_overrun_is_caught_by_memcheck(gate_run: dict[str, dict]) -> None:
    r = gate_run["memcheck:gate/scale_tail_gate.py::scale_tail_gate"]
    assert r["status"] == "failed", r
    # The tool's own report (invalid-global-write), not only the guard band's out-of-bounds-write:
    # under the tool the candidate's tensors have no guard band to absorb the overrun.
    assert any(k.startswith("invalid-") for k in _kinds(r)), r["findings"]


def test_tail_overrun_is_caught_by_the_guard_bands_too(gate_run: dict[str, dict]) -> None:
    r = gate_run["equivalence:gate/scale_tail_gate.py::scale_tail_gate"]
    assert r["status"] == "failed", r
    assert "out-of-bounds-write" in _kinds(r), r["findings"]


def test_shared_memory_race_is_caught_by_racecheck(gate_run: dict[str, dict]) -> None:
    r = gate_run["racecheck:gate/reverse_race_gate.py::reverse_race_gate"]
    assert r["status"] == "failed", r
    assert any("race" in k for k in _kinds(r)), r["findings"]
    assert any((f.get("file") or "").endswith("reverse_race.cu") for f in r["findings"]), r["findings"]



ONLY_EQUIVALENCE = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 6, growth: false, shrink: false}
"""

WILD_WRITE = """\
extern "C" __global__ void a_wild(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float* nowhere = (float*)16;
    if (i < n) nowhere[i] = 2.0f * x[i];  // an illegal address: the CUDA context is lost for good
}
"""


def _scale_repo(root: Path, names: list[str], kernels: dict[str, str] | None = None) -> Path:
    """A repository whose feature branch adds one scale-like kernel and its spec per name."""
    repo = _feature_repo(root / "repo", ONLY_EQUIVALENCE)
    for name in names:
        src = (kernels or {}).get(name, SCALE.replace("void scale(", f"void {name}("))
        (repo / f"csrc/{name}.cu").write_text(src)
        (repo / f"gate/{name}_gate.py").write_text(SPEC.format(name=name, file=name, reference="lambda x: 2 * x"))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "kernels")
    return repo


def _check(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--base", "main", *args], cwd=repo,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def test_doctor_vets_the_gpu_beside_the_first_jobs_and_a_cached_rerun_skips_it(tmp_path: Path) -> None:
    """On one GPU, `check` examines the GPU before the first job and probes the tools beside it,
    and says so; a re-run served wholly from the cache starts no job and does not wait for the
    doctor."""
    repo = _scale_repo(tmp_path, ["scale"])
    first = _check(repo, "--cache-dir", str(tmp_path / "cache"))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "the doctor probes the tools beside the first jobs" in first.stdout
    assert "GPU(s) healthy" in first.stdout and first.stdout.index("running 1 jobs") < first.stdout.index("doctor:")
    second = _check(repo, "--cache-dir", str(tmp_path / "cache"))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "running 0 jobs (1 cached)" in second.stdout
    assert "doctor:" not in second.stdout


def test_a_kernel_that_breaks_the_cuda_context_fails_alone(tmp_path: Path) -> None:
    """A write to an illegal address leaves that process's CUDA context unusable. Its job fails with
    a cuda-error finding; the jobs after it on the same GPU run in fresh processes and pass."""
    names = ["a_wild", "b_scale", "c_scale", "d_scale"]
    repo = _scale_repo(tmp_path, names, {"a_wild": WILD_WRITE})
    p = _check(repo, "--no-cache", env={"CUDA_VISIBLE_DEVICES": "0"})
    assert p.returncode == 1, p.stdout + p.stderr
    results = {r["spec"]: r for r in json.loads((repo / ".gpu-gate/out/results.json").read_text())["results"]}
    wild = results["gate/a_wild_gate.py::a_wild_gate"]
    assert wild["status"] == "failed" and "cuda-error" in _kinds(wild), wild
    assert "illegal" in " ".join(f["message"] for f in wild["findings"]).lower(), wild["findings"]
    for name in names[1:]:
        r = results[f"gate/{name}_gate.py::{name}_gate"]
        assert r["status"] == "passed", (name, r["reason"], r["findings"])
    assert "unusable" not in p.stdout  # the GPU itself stayed healthy
