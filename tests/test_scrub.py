"""Nothing the worker says reaches a report unexamined: secrets that code under review read and put in
an exception message are redacted in every report, and long texts are capped (never cut mid-word)."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

from gpu_gate import scrub
from gpu_gate.findings import Finding, JobResult, Status

TOKEN = "ghs_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
BASIC = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----"


def test_each_format_is_redacted_and_says_so() -> None:
    for secret, what in ((TOKEN, "GitHub token"), ("github_pat_" + "x" * 60, "GitHub token"),
                         (f"AUTHORIZATION: basic {BASIC}", "authorization header"), (KEY, "private key"),
                         ("https://x-access-token:" + TOKEN + "@github.com/o/r", "token"),
                         ("root:$6$rounds=5000$saltsalt$" + "Ab1/" * 12 + ":19000:0:99999:7:::", "password hash"),
                         (base64.b64encode(KEY.encode()).decode(), "base64 of a secret")):
        out, n = scrub.secrets(f"before {secret} after")
        assert n >= 1 and "[redacted: " in out and what.split()[0] in out, (secret, out)
        assert TOKEN not in out and "PRIVATE KEY-----\nb3Bl" not in out, out
        assert out.startswith("before ") and out.endswith(" after") or what in ("private key", "password hash")


def test_ordinary_text_is_left_alone() -> None:
    plain = ("Mismatched elements: 3 / 100 (3.0%); sha 0123456789abcdef0123456789abcdef01234567; "
             "tensor([0.1250, 0.2500]); path kernels/rms_norm.py:42")
    assert scrub.secrets(plain) == (plain, 0)


def test_long_texts_are_capped_at_a_word_with_a_note() -> None:
    text = "word " * 5000
    out = scrub.cap(text, 1000)
    assert len(out) < 1100 and out.endswith("more characters left out]") and "wor [" not in out


def test_a_job_result_is_scrubbed_everywhere_a_worker_writes() -> None:
    f = Finding("equivalence", "refused-canonical", f"ValueError: {TOKEN}", details={"trace": [f"x {KEY}"]})
    r = JobResult("j", "equivalence", Status.FAILED, "required", findings=[f], reason=f"because {TOKEN}",
                  log_tail=f"AUTHORIZATION: bearer {TOKEN}")
    blob = json.dumps(scrub.result(r).to_json())
    assert TOKEN not in blob and "b3BlbnNzaC1rZXkt" not in blob and blob.count("[redacted: ") >= 4


POLICY = """\
version: 1
kernels: {include: ["kernels/**/*.py"]}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  equivalence: {cases: 4, growth: false, shrink: false}
"""

KERNEL = "def double(x):\n    return x * 2\n"

# The attack: the kernel module reads what the checkout keeps (the extraheader actions/checkout writes
# into .git/config without persist-credentials: false) and raises with it, so that it lands in the PR
# comment. Its honest twin raises nothing.
LEAKY = """\
import pathlib
def double(x):
    try:
        text = pathlib.Path(__file__).resolve().parents[1].joinpath(".git", "config").read_text()
    except OSError as exc:
        text = f"no config here ({exc})"
    raise ValueError("cannot run: " + text)
"""

SPEC = """\
import gpu_gate as gg
from kernels.ops import double

@gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x * 2)
def double_gate(x):
    return double(x)
"""


def test_a_token_a_kernel_reads_never_reaches_a_report(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("leak", {".gpu-gate.yml": POLICY, "kernels/__init__.py": "", "kernels/ops.py": KERNEL,
                           "gate/ops_gate.py": SPEC})
    with open(r.path / ".git" / "config", "a") as f:
        f.write(f'[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic {BASIC}\n')
    r.branch("feature")
    r.commit("leak", {"kernels/ops.py": LEAKY})
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--base", "main", "--cpu"], cwd=r.path,
                       capture_output=True, text=True, timeout=600, env={**os.environ})
    out = r.path / ".gpu-gate" / "out"
    reports = {f.name: f.read_text() for f in out.iterdir() if f.is_file()}
    assert set(reports) >= {"report.md", "report.sarif", "junit.xml", "results.json"}, reports
    for name, text in {**reports, "console": p.stdout + p.stderr}.items():
        assert TOKEN not in text and BASIC not in text, name
    assert p.returncode == 1  # the kernel refused every case: nothing verified
