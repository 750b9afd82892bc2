"""A job that runs an export of the head commit has the work tree hidden (see commands/check.py):
what lives inside it that the worker needs to start (gpu-gate's own package, the interpreter's
installation) stays shown, and nothing that would bring a hidden directory back into view is."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpu_gate.executor import argv, sandbox
from gpu_gate.executor.options import ExecOptions

BWRAP = sandbox.Available("bwrap", "bwrap", "bwrap")


def test_gpu_gate_inside_a_hidden_work_tree_stays_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work_tree = tmp_path / "checkout"
    own = work_tree / "vendor" / "gpu_gate"
    venv = work_tree / ".venv" / "lib" / "site-packages"
    for d in (own, venv, work_tree / "out"):
        d.mkdir(parents=True)
    monkeypatch.setattr(sandbox, "gate_package_dir", lambda: own)
    monkeypatch.setattr(sandbox, "python_install_paths", lambda: (venv, work_tree))
    opts = ExecOptions(repo_root=tmp_path / "export", gpus=(), work_root=tmp_path / "jobs",
                       hide=(work_tree / "out", work_tree))
    layout = argv._layout(opts, None, tmp_path / "jobs" / "j" / "w", BWRAP)
    assert work_tree in layout.hide
    assert own in layout.readonly and venv in layout.readonly
    assert work_tree not in layout.readonly  # shown again, it would show the work tree and its reports
    mounts = sandbox.bwrap_argv("bwrap", layout, ["true"], 3)
    shown = [mounts[i + 2] for i, a in enumerate(mounts) if a == "--ro-bind"]
    hidden = [mounts[i + 1] for i, a in enumerate(mounts) if a == "--tmpfs"]
    assert str(work_tree) in hidden and str(own) in shown
    assert mounts.index(str(work_tree)) < max(i for i, a in enumerate(mounts) if a == str(own))  # deeper, later
