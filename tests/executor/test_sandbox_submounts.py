"""What is mounted inside a directory the sandbox shows stays in view, read-only.

GPU containers mount the NVIDIA driver's libraries into the image: one file at a time under
``/usr/lib/x86_64-linux-gnu`` (the NVIDIA container toolkit), or a whole squashfs under
``/usr/local/nvidia``. A sandbox that shows ``/usr`` through a plain (non-recursive) bind shows
empty places there: CUDA then finds no driver, and every GPU job of an honest change fails
("Found no NVIDIA driver on your system", seen on an H200 runner under the unshare sandbox).
Here a tmpfs mounted inside a shown directory plays the driver's mount.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_gate.executor import sandbox


def _boxes() -> list[sandbox.Available]:
    out = []
    if shutil.which("bwrap") and sandbox._try([shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "true"]) is None:
        out.append(sandbox.Available("bwrap", shutil.which("bwrap"), "bwrap"))
    u = shutil.which("unshare")
    if u and sandbox._try([*sandbox._unshare_base(u), "--", "true"]) is None:
        out.append(sandbox.Available("unshare", u, "unshare"))
    return out


BOXES = _boxes()


@pytest.fixture
def driver_mount(tmp_path: Path):  # type: ignore[no-untyped-def]
    """``shown/lib`` is a mount of its own (a tmpfs holding ``libcuda.so.1``), inside ``shown``."""
    if os.geteuid() != 0:
        pytest.skip("mounting a stand-in for the driver's libraries needs root")
    shown = (tmp_path / "shown").resolve()
    lib = shown / "lib"
    lib.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(lib)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    (lib / "libcuda.so.1").write_text("driver\n")
    yield shown
    subprocess.run(["umount", "-l", str(lib)], capture_output=True)


@pytest.mark.skipif(not BOXES, reason="neither bwrap nor unshare works here")
@pytest.mark.parametrize("box", BOXES, ids=[b.kind for b in BOXES])
def test_a_mount_inside_a_shown_directory_is_seen_and_read_only(tmp_path: Path, driver_mount: Path,
                                                                  box: sandbox.Available) -> None:
    repo, jobdir = tmp_path / "repo", tmp_path / "jobs" / "w"
    repo.mkdir()
    jobdir.mkdir(parents=True)
    layout = sandbox.Layout(repo=repo, jobdir=jobdir, readonly=(driver_mount,))
    probe = (f"cat {driver_mount}/lib/libcuda.so.1; "
             f"if touch {driver_mount}/lib/planted 2>/dev/null; then echo writable; else echo read-only; fi")
    read, write = os.pipe()
    try:
        argv = sandbox.wrap(box, layout, ["bash", "-c", probe], write)
        p = subprocess.run(argv, capture_output=True, text=True, pass_fds=(write,), timeout=60)
    finally:
        os.close(write)
        os.close(read)
    assert p.stdout.split() == ["driver", "read-only"], (p.stdout, p.stderr)
    assert not (driver_mount / "lib" / "planted").exists()
