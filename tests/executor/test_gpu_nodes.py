"""A GPU job's sandbox holds the driver's shared nodes and its own GPU's node alone.

The attack: on a runner with several GPUs, a job pinned to one GPU by CUDA_VISIBLE_DEVICES starts a
process that names another GPU, and loads or hangs the GPU another job is judged on. In a bubblewrap
sandbox that holds every ``/dev/nvidia*`` it can (what the sandbox did before); in one that holds only
its own GPU's node, the other GPU's node is not there to open. The GPU test in tests/gpu/ runs this
with CUDA on two real GPUs; here the nodes are stand-in files in a real bwrap sandbox, and the driver's
GPU list is a stand-in /proc tree.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpu_gate.executor import argv, gpu_nodes, sandbox
from gpu_gate import nvml
from gpu_gate.commands import check as pipeline
from gpu_gate.executor.options import ExecOptions

# Two GPUs whose minor numbers run against their PCI bus order: CUDA's index 0 (PCI_BUS_ID order) is
# /dev/nvidia1, not /dev/nvidia0.
INFO = """Model: \t\t NVIDIA H100 80GB HBM3
IRQ:   \t\t 512
GPU UUID: \t {uuid}
Video BIOS: \t 96.00.99.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t {bus}
Device Minor: \t {minor}
GPU Excluded:\t No
"""
FIRST = gpu_nodes.Gpu(1, "GPU-1111aaaa-0000-0000-0000-000000000001", "0000:18:00.0")
SECOND = gpu_nodes.Gpu(0, "GPU-2222bbbb-0000-0000-0000-000000000002", "0000:2a:00.0")
NODES = ["/dev/nvidia-caps", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0",
         "/dev/nvidia1", "/dev/nvidiactl"]
SHARED = ("/dev/nvidia-caps", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl")


def _proc(root: Path, *gpus: gpu_nodes.Gpu) -> Path:
    for g in gpus:
        d = root / g.bus
        d.mkdir(parents=True)
        (d / "information").write_text(INFO.format(uuid=g.uuid, bus=g.bus, minor=g.minor))
    return root


def test_the_drivers_list_gives_each_gpus_minor_number_uuid_and_bus(tmp_path: Path) -> None:
    root = _proc(tmp_path, SECOND, FIRST)
    (root / "0000:99:00.0").mkdir()  # a GPU the driver says nothing about yet: left out
    (root / "0000:99:00.0" / "information").write_text("Model: \t unknown\n")
    assert sorted(gpu_nodes.from_proc(root), key=lambda g: g.bus) == [FIRST, SECOND]
    assert gpu_nodes.from_proc(tmp_path / "absent") == []


def test_nvml_gives_the_same_and_its_bus_ids_are_brought_to_the_drivers_form() -> None:
    class Lib:
        class NVMLError(Exception):
            pass

        def nvmlInit(self) -> None: ...
        def nvmlShutdown(self) -> None: ...
        def nvmlDeviceGetCount(self) -> int: return 2
        def nvmlDeviceGetHandleByIndex(self, i: int) -> int: return i
        def nvmlDeviceGetPciInfo(self, h: int) -> Any:
            return SimpleNamespace(busId=(b"00000000:18:00.0", b"00000000:2A:00.0")[h])
        def nvmlDeviceGetMinorNumber(self, h: int) -> int: return (1, 0)[h]
        def nvmlDeviceGetUUID(self, h: int) -> bytes: return (FIRST.uuid, SECOND.uuid)[h].encode()

    assert gpu_nodes.from_nvml(Lib()) == [FIRST, SECOND]

    class Broken(Lib):
        def nvmlDeviceGetMinorNumber(self, h: int) -> int:
            raise self.NVMLError("Not Supported")

    assert gpu_nodes.from_nvml(Broken()) == []
    with pytest.raises(nvml.NvmlUnavailable):
        nvml.identities(Broken())


@pytest.mark.parametrize("token", ["0", FIRST.uuid, FIRST.uuid[:12]])
def test_a_job_gets_its_own_gpus_node_by_index_uuid_or_uuid_prefix_and_is_named_by_uuid(token: str) -> None:
    own = gpu_nodes.for_job(token, [SECOND, FIRST], NODES, order="PCI_BUS_ID")
    assert own.whole is None
    assert own.nodes == (*SHARED[:4], "/dev/nvidia1", "/dev/nvidiactl")  # index 0 in bus order is minor 1
    assert own.cuda_name == FIRST.uuid
    other = gpu_nodes.for_job("1", [SECOND, FIRST], NODES, order="")
    assert "/dev/nvidia0" in other.nodes and "/dev/nvidia1" not in other.nodes and other.cuda_name == SECOND.uuid


@pytest.mark.parametrize("token, found, nodes, order, why", [
    ("MIG-5c9d2e1a-0000", [FIRST, SECOND], NODES, "", "MIG instance"),
    ("0", [FIRST, SECOND], NODES, "FASTEST_FIRST", "CUDA_DEVICE_ORDER=FASTEST_FIRST"),
    ("0", [], NODES, "", "lists no GPU"),
    ("2", [FIRST, SECOND], NODES, "", "matches no GPU"),
    ("GPU-", [FIRST, SECOND], NODES, "", "more than one"),
    ("0", [FIRST, SECOND], [n for n in NODES if n != "/dev/nvidia1"], "", "/dev/nvidia1 does not exist"),
])
def test_where_the_jobs_gpu_cannot_be_told_apart_every_node_is_bound_and_the_reason_given(
        token: str, found: list[gpu_nodes.Gpu], nodes: list[str], order: str, why: str) -> None:
    own = gpu_nodes.for_job(token, found, nodes, order=order)
    assert own.nodes == tuple(nodes) and own.cuda_name == token
    assert own.whole is not None and why in own.whole


BWRAP = sandbox.Available("bwrap", shutil.which("bwrap"), "bwrap") if shutil.which("bwrap") else None
UNSHARE = sandbox.Available("unshare", "unshare", "unshare")


def _machine(monkeypatch: pytest.MonkeyPatch, nodes: list[str]) -> None:
    monkeypatch.setattr(gpu_nodes, "gpus", lambda: (SECOND, FIRST))
    monkeypatch.setattr(gpu_nodes, "node_names", lambda dev="/dev": list(nodes))
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def test_the_executor_gives_a_bwrap_job_its_gpus_nodes_and_uuid_and_an_unshare_job_the_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, NODES)
    opts = ExecOptions(repo_root=tmp_path, gpus=("0", "1"))
    bw = sandbox.Available("bwrap", "bwrap", "bwrap")
    env = argv._env_for(opts, "0", tmp_path, 1, "equivalence", bw)
    assert env["CUDA_VISIBLE_DEVICES"] == FIRST.uuid
    layout = argv._layout(opts, "0", tmp_path / "w", bw)
    assert "/dev/nvidia1" in layout.devices and "/dev/nvidia0" not in layout.devices
    command = sandbox.bwrap_argv("bwrap", layout, ["true"], 3)
    bound = [command[i + 1] for i, a in enumerate(command) if a == "--dev-bind"]
    assert bound == list(layout.devices)
    # unshare keeps the machine's /dev: the index stays, and the run's notes do not claim otherwise
    assert argv._env_for(opts, "0", tmp_path, 1, "equivalence", UNSHARE)["CUDA_VISIBLE_DEVICES"] == "0"
    assert argv._layout(opts, None, tmp_path / "w", bw).devices == ()  # a CPU job binds none
    assert pipeline._shared_gpu_nodes(("0", "1"), bw) == []


def test_the_run_notes_each_gpu_whose_jobs_hold_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, NODES)
    bw = sandbox.Available("bwrap", "bwrap", "bwrap")
    notes = pipeline._shared_gpu_nodes(("0", "MIG-abc"), bw)
    assert len(notes) == 1 and "GPU MIG-abc hold every GPU's device node" in notes[0]
    assert pipeline._shared_gpu_nodes(("MIG-abc",), UNSHARE) == []  # unshare is said to be weaker already


# --- the attack, in a real bwrap sandbox ------------------------------------------------------------

PROBE = r"""
import json, os, sys
seen = {}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        seen[path] = "opened"
    except OSError as exc:
        seen[path] = type(exc).__name__
print(json.dumps(seen))
"""


@pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("restricted", [True, False], ids=["own-gpu-only", "every-gpu (before)"])
def test_a_job_pinned_to_one_gpu_cannot_open_another_gpus_node(tmp_path: Path, restricted: bool) -> None:
    """Stand-in nodes under /tmp, which bwrap replaces with its own: only what it binds is there."""
    dev = tmp_path / "dev"
    dev.mkdir()
    names = ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"]
    for n in names:
        (dev / n).write_text("")
    nodes = [str(dev / n) for n in names]
    own = gpu_nodes.for_job("0", [SECOND, FIRST], nodes, order="")  # index 0: minor 1
    repo, jobdir = tmp_path / "repo", tmp_path / "w"
    repo.mkdir()
    jobdir.mkdir()
    layout = sandbox.Layout(repo=repo, jobdir=jobdir, readonly=sandbox.python_install_paths(),
                            devices=own.nodes if restricted else tuple(nodes))
    assert BWRAP is not None and BWRAP.path is not None
    with (tmp_path / "count").open("w+") as count:
        command = sandbox.bwrap_argv(BWRAP.path, layout, [sys.executable, "-I", "-c", PROBE, *nodes], count.fileno())
        r = subprocess.run(command, capture_output=True, text=True, timeout=60, pass_fds=(count.fileno(),))
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen[str(dev / "nvidia1")] == "opened"  # the legitimate twin: its own GPU
    assert seen[str(dev / "nvidiactl")] == "opened" and seen[str(dev / "nvidia-uvm")] == "opened"
    if restricted:
        assert seen[str(dev / "nvidia0")] == "FileNotFoundError"  # the other GPU is not there
    else:
        assert seen[str(dev / "nvidia0")] == "opened"  # the attack works where every node is bound
