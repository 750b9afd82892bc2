"""No absolute path of the runner in any report: paths in the repository become relative, the rest
placeholders, in JUnit, Markdown, SARIF and results.json alike."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from gpu_gate.report.paths import Scrubber, runner_roots

ROOTS = {"/srv/actions/_work/kernels/kernels": "", "/tmp/tmpab12/tree": "<base>",
         "/opt/venv/lib/python3.12/site-packages": "<site-packages>", "/opt/venv": "<python>", "/tmp": "<tmp>",
         "/home/runner": "~"}


@pytest.mark.parametrize("given, shown", [
    ("/srv/actions/_work/kernels/kernels/csrc/add.cu(3): error: identifier undeclared",
     "csrc/add.cu(3): error: identifier undeclared"),
    ('  File "/opt/venv/lib/python3.12/site-packages/triton/knobs.py", line 504, in warn',
     '  File "<site-packages>/triton/knobs.py", line 504, in warn'),
    ("cd /srv/actions/_work/kernels/kernels && make", "cd . && make"),
    ("/tmp/tmpab12/tree/csrc/add.cu: the base's build", "<base>/csrc/add.cu: the base's build"),
    ("/tmp/gate-x1y2/job.json /home/runner/.cache/pip", "<tmp>/gate-x1y2/job.json ~/.cache/pip"),
    ("/opt/venv/bin/python -I", "<python>/bin/python -I"),
    ("/srv/actions/_work/kernels/kernels2/x.py", "<path>/x.py"),  # another directory that only starts the same
    ("PYTHONPATH=/opt/other/site:/usr/lib/python3/dist-packages", "PYTHONPATH=<path>/site:<path>/dist-packages"),
    ("see https://github.com/octo/kernels/actions/runs/1 and docs/trust.md", None),
    ("/dev/nvidia0 and /proc/self/environ", None),
    ("3 / 100 (3.0%), shard 1/2, x /BLOCK", None),
    ("/gpu-gate approve 0123abc", None),
])
def test_paths_become_relative_or_placeholders(given: str, shown: str | None) -> None:
    assert Scrubber(ROOTS).text(given) == (given if shown is None else shown)


def test_the_runners_own_directories_are_known() -> None:
    roots = runner_roots([Path("/srv/w/repo")], Path("/srv/t/base"), env={"RUNNER_TEMP": "/srv/_temp"})
    assert roots["/srv/w/repo"] == "" and roots["/srv/t/base"] == "<base>" and roots["/srv/_temp"] == "<runner-temp>"
    assert roots[sysconfig.get_paths()["purelib"]] == "<site-packages>"
    assert roots[tempfile.gettempdir()] == "<tmp>" and roots[str(Path.home())] == "~"


SPEC = """import gpu_gate as gg
from mylib.ops import double


@gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])}, reference=lambda x: x * 2)
def ops_gate(x):
    return double(x)
"""
# The module writes where it and torch live to stderr, then fails to import, naming its own file.
OPS = """import sys

import torch

print(f"loading {__file__} with torch from {torch.__file__}", file=sys.stderr)
raise ImportError(f"mylib.ops: no configuration next to {__file__}")
"""
POLICY = """version: 1
specs: ["gate/**/*_gate.py"]
checks: {compile: off, determinism: off, memcheck: off, racecheck: off, synccheck: off, initcheck: off}
"""


def test_no_report_of_a_real_run_names_the_runners_paths(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/ops.py": "def double(x):\n    "
                           "return x * 2\n", "gate/ops_gate.py": SPEC})
    r.branch("feature")
    r.commit("configurable ops", {"mylib/ops.py": OPS})
    res = subprocess.run([sys.executable, "-m", "gpu_gate", "check", "--base", "main", "--head", "feature", "--cpu",
                          "--no-cache"], cwd=r.path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 1, res.stdout + res.stderr
    reports = {p.name: p.read_text() for p in (r.path / ".gpu-gate" / "out").iterdir()}
    assert set(reports) == {"junit.xml", "report.md", "report.sarif", "results.json"}
    machine = {str(r.path), os.path.realpath(r.path), sys.prefix, tempfile.gettempdir(), str(Path.home())}
    for name, text in reports.items():
        assert not [p for p in machine if p in text], (name, [p for p in machine if p in text])
        assert "/site-packages/" not in text, name
    assert "mylib/ops.py" in reports["report.md"] and "no configuration next to mylib/ops.py" in reports["junit.xml"]
    assert "with torch from &lt;site-packages&gt;/torch/__init__.py" in reports["junit.xml"]
