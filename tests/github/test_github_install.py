"""The action's install step: gpu-gate for the interpreter that has the runner's torch, from the action's checkout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from gpu_gate.github import install

ROOT = Path(__file__).resolve().parents[2]


def runner_python(tmp_path: Path, with_packages: bool) -> str:
    """A runner's interpreter, as a venv: with this venv's packages (torch, pydantic, ...) through a
    .pth file but without gpu-gate (the editable install's own .pth is not followed), or bare."""
    env_dir = tmp_path / "runner-venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    if with_packages:
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "runner-stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def imports(python: str, pythonpath: str, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | ({"PYTHONPATH": pythonpath} if pythonpath else {})
    return subprocess.run([python, "-P", "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_an_interpreter_with_torch_but_no_gpu_gate_gets_it_from_the_checkout(tmp_path: Path) -> None:
    python = runner_python(tmp_path, with_packages=True)
    assert imports(python, "", "import gpu_gate").returncode != 0, "the runner's python must lack gpu-gate"
    assert imports(python, "", "import torch, pydantic").returncode == 0, "and have torch and the dependencies"
    out = install.install(python, ROOT, tmp_path / "gg")
    assert out["python"] == python and out["pythonpath"] == str(tmp_path / "gg" / "site")
    res = imports(python, out["pythonpath"], "import gpu_gate, torch; print(gpu_gate.__file__, torch.__file__)")
    assert res.returncode == 0, res.stderr
    gg_file, torch_file = res.stdout.split()
    assert gg_file.startswith(str(tmp_path / "gg" / "site")) and "torch" in torch_file
    assert not (tmp_path / "gg" / "deps").exists(), "nothing to fetch: the interpreter has the dependencies"
    path = json.loads(out["sys-path"])
    assert path[0] == out["pythonpath"] and sysconfig.get_paths()["purelib"] in path


def test_an_interpreter_that_already_has_this_version_is_used_as_it_is(tmp_path: Path) -> None:
    out = install.install(sys.executable, ROOT, tmp_path / "gg")
    assert out["pythonpath"] == "" and not (tmp_path / "gg").exists()


def test_missing_dependencies_are_named_by_requirement(tmp_path: Path) -> None:
    python = runner_python(tmp_path, with_packages=False)
    reqs = install.requirements(ROOT)
    assert install.missing(python, reqs) == reqs
    assert {install._name(r) for r in reqs} <= set(install.MODULES), "every dependency needs its module name"


def test_an_old_python_is_one_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "python3.9"
    fake.write_text("#!/bin/sh\necho 'Unknown option: -P' >&2\nexit 2\n")
    fake.chmod(0o755)
    with pytest.raises(SystemExit, match="is not Python 3.11 or newer"):
        install.install(str(fake), ROOT, tmp_path / "gg")


def test_without_a_checkout_the_installed_gpu_gate_is_used_or_the_error_says_what_to_pass(tmp_path: Path) -> None:
    out = install.install(sys.executable, None, tmp_path / "gg")
    assert out["pythonpath"] == "" and json.loads(out["sys-path"])
    with pytest.raises(SystemExit, match="pass gpu-gate-ref"):
        install.install(runner_python(tmp_path, with_packages=True), None, tmp_path / "gg")
