"""The action's install path on a GPU runner, as `action.yml` runs it.

The runner's interpreter has the CUDA build of torch but not gpu-gate. The install step copies
gpu-gate from the action's checkout onto a path of its own, the interpreter check proves the GPU in
that interpreter, and the demo's gate then runs its kernels on the GPU with it: the refactored
kernel passes every check, the planted bug fails equivalence.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_github_install import runner_python  # noqa: E402 - the CPU tests' runner interpreter

ROOT = Path(__file__).resolve().parents[2]


def run(python: str, pythonpath: str, *args: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([python, "-P", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_runners_cuda_torch_runs_the_gate_through_the_actions_install(tmp_path: Path) -> None:
    python = runner_python(tmp_path, with_packages=True)  # the CUDA torch, not gpu-gate
    lacks = run(python, "", "-c", "import gpu_gate", cwd=tmp_path, timeout=60)
    assert lacks.returncode != 0, "the runner's python must lack gpu-gate, as on a fresh runner"

    step = subprocess.run([sys.executable, "-I", str(ROOT / "gpu_gate" / "github" / "install.py"), python, str(ROOT),
                           str(tmp_path / "gg")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GITHUB_OUTPUT": str(tmp_path / "outputs")})
    assert step.returncode == 0, step.stdout + step.stderr
    outputs = dict(line.split("=", 1) for line in (tmp_path / "outputs").read_text().splitlines() if "=" in line)
    assert outputs["python"] == python
    pythonpath = outputs["pythonpath"]
    assert pythonpath.startswith(str(tmp_path / "gg")), outputs

    probe = run(python, pythonpath, "-m", "gpu_gate.github.interpreter", "--require-gpu", cwd=tmp_path, timeout=120)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert "torch.cuda.is_available() = True" in probe.stdout, probe.stdout

    demo = run(python, pythonpath, "-m", "gpu_gate", "demo", "--gpu", "--out", str(tmp_path / "demo"),
               cwd=tmp_path, timeout=900)
    log = demo.stdout + demo.stderr
    assert demo.returncode == 0, log[-4000:]  # 0: the demo came out as it must (rmsnorm red, axpby green)
    record = json.loads((tmp_path / "demo" / "reports" / "results.json").read_text())
    status = {(r["check"], r.get("spec") or r["kernels"][0]): r["status"] for r in record["results"]}
    axpby = {c: s for (c, t), s in status.items() if "axpby" in t}
    rms = {c: s for (c, t), s in status.items() if "rmsnorm" in t}
    assert axpby.get("equivalence") == "passed" and rms.get("equivalence") == "failed", status
    ran_on_gpu = [c for c in ("determinism", "racecheck", "memcheck") if axpby.get(c) == "passed"]
    assert ran_on_gpu == ["determinism", "racecheck", "memcheck"], f"the GPU checks did not run: {axpby}"
    imported = run(python, pythonpath, "-c", "import gpu_gate; print(gpu_gate.__file__)", cwd=tmp_path, timeout=60)
    assert imported.stdout.strip().startswith(str(tmp_path / "gg")), "the gate ran the checkout's copy"
