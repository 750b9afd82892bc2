"""What the wheel and the sdist carry: the licence, the action's files, extras that fit the machine."""
from __future__ import annotations

import hashlib
import re
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from build_helpers import ROOT, build, wheel_and_sdist

# The SHA-256 of the Apache License 2.0 as the Apache Software Foundation publishes it
# (https://www.apache.org/licenses/LICENSE-2.0.txt; Debian's /usr/share/common-licenses/Apache-2.0).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return wheel_and_sdist(tmp_path_factory.mktemp("dist"))


def metadata(wheel: Path) -> tuple[list[str], dict[str, str]]:
    with zipfile.ZipFile(wheel) as z:
        text = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    msg = Parser().parsestr(text)
    return z.namelist(), {k: "\n".join(msg.get_all(k) or []) for k in set(msg.keys())}


def test_the_licence_is_the_apache_2_0_text_and_notice_is_there() -> None:
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256
    assert "Apache License, Version 2.0" in (ROOT / "NOTICE").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE", "NOTICE"]


def test_the_wheel_carries_the_licence_and_the_actions_files(dist: tuple[Path, Path]) -> None:
    wheel, _ = dist
    names, meta = metadata(wheel)
    assert meta["License-Expression"] == "Apache-2.0"
    assert {n.split("/", 1)[1] for n in names if ".dist-info/licenses/" in n} == {"licenses/LICENSE", "licenses/NOTICE"}
    with zipfile.ZipFile(wheel) as z:
        for name in ("action.yml", "pyproject.toml", "LICENSE", "NOTICE"):  # what `gpu-gate vendor` copies
            assert z.read(f"gpu_gate/_action/{name}") == (ROOT / name).read_bytes(), name


def test_the_sdist_carries_the_licence_and_action_yml_and_builds_the_same_wheel(dist: tuple[Path, Path],
                                                                                tmp_path: Path) -> None:
    wheel, sdist = dist
    with tarfile.open(sdist) as t:
        t.extractall(tmp_path, filter="data")
        top = {Path(n).parts[1] for n in t.getnames() if len(Path(n).parts) == 2}
    assert {"LICENSE", "NOTICE", "action.yml", "pyproject.toml", "setup.py"} <= top
    (tree,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    again = build("wheel", tree, tmp_path / "again")
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(again) as b:
        assert sorted(n for n in a.namelist() if "dist-info" not in n) == sorted(n for n in b.namelist()
                                                                                 if "dist-info" not in n)
        assert a.read("gpu_gate/_action/action.yml") == b.read("gpu_gate/_action/action.yml")


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in requirements}


def test_the_cpu_extra_is_torch_triton_and_numpy_and_no_cuda_library() -> None:
    # numpy: Triton's interpreter (and gpu-gate's adaptations of it) compute with it, and torch no longer brings it
    assert names(extras()["cpu"]) == {"torch", "triton", "numpy"}


def test_there_is_a_gpu_extra_per_cuda_major_and_gpu_stays_cuda_13() -> None:
    cu12, cu13 = names(extras()["gpu-cu12"]), names(extras()["gpu-cu13"])
    assert cu12 == {"torch", "cupy-cuda12x", "nvidia-cuda-nvrtc-cu12", "nvidia-ml-py"}
    assert cu13 == {"torch", "cupy-cuda13x", "nvidia-cuda-nvrtc", "nvidia-ml-py"}
    assert extras()["gpu"] == ["gpu-kernel-gate[gpu-cu13]"], "gpu: the name earlier releases gave CUDA 13"


def test_the_readmes_first_command_installs_only_what_the_cpu_demo_needs() -> None:
    first = re.search(r"```sh\n(.*?)\n", (ROOT / "README.md").read_text()).group(1)
    installed = re.findall(r"pip install (?:-e )?'\.\[([\w,-]+)\]'", first)
    assert installed == ["cpu"], first
    assert "torch==" in first.split("'.[")[0], "the CPU build of torch comes first, before the extra"
    assert first.rstrip().endswith("gpu-gate demo")


def test_ci_installs_the_cpu_torch_first_and_never_a_cuda_one() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    torch_at = script.index("pip install -q torch==")
    extras_at = script.index("pip install -q -e '.[")
    assert torch_at < extras_at
    used = re.search(r"pip install -q -e '\.\[([\w,-]+)\]'", script).group(1).split(",")
    for extra in used:  # every torch the extras name is a range the CPU build already satisfies
        reqs = extras().get(extra, [])
        assert all(not r.startswith("torch") or r == "torch>=2.3" for r in reqs), (extra, reqs)
