"""The base's code on the head's autotune configs.

gpu-gate gives each new key of an autotuned kernel the next config of its list (``autotune: rotate``).
A pull request that drops a config from the list shifts every later turn: on the same case the head's
worker and the base's then ran different configs, and a failure that one config of the base's own
list has (the repository's debt) showed at the head as new, on a case where the base's turn fell on
another config. The base's code now runs such a case again on the head's configs before its failures
are told apart. The twin: a change that breaks that config itself stays new, and blocks. The same for
the determinism check: a config that varies from run to run at the base too is debt.

Real git repositories, real sandboxed workers, Triton's interpreter on the CPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

POLICY = """\
version: 1
kernels: {include: ["mylib/**/*.py"]}
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 10, growth: false, shrink: false, seed: 3}
"""

# A row-wise doubling as a library writes it: one autotuned kernel, three block sizes. TAIL_256 says
# how the widest block masks its last block: right (offs < n), or stopping at a multiple of 16, which
# leaves the tail of rows whose length is not one unwritten.
KERNEL = '''\
import torch
import triton
import triton.language as tl

CONFIGS = [CONFIG_LIST]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = TAIL_256
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def double(x):
    x = x.contiguous()
    out = torch.zeros_like(x)
    _double_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out
'''
ALL = 'triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})'
WITHOUT_64 = 'triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})'
RIGHT = "offs < n"
SHORT_AT_256 = "offs < n if BLOCK != 256 else offs < (n // 16) * 16"

SPEC = '''\
import gpu_gate as gg
from mylib.double import double


@gg.spec(dims={"n": gg.Dim(1, 2000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: x * 2)
def double_gate(x):
    return double(x)
'''


def _kernel(configs: str, mask: str) -> str:
    return KERNEL.replace("CONFIG_LIST", configs).replace("TAIL_256", mask)


def _gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GITHUB_ACTIONS")}
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=900)


def _pr(make_repo, base: str, head: str) -> tuple[int, str, list[dict]]:  # type: ignore[no-untyped-def]
    r = make_repo("tlib", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/double.py": base,
                           "gate/double_gate.py": SPEC})
    r.branch("feature")
    r.commit("drop the smallest block", {"mylib/double.py": head})
    p = _gate("check", "--base", "main", "--cpu", cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    findings = [f for res in results.get("results", []) if res["check"] == "equivalence" for f in res["findings"]]
    return p.returncode, p.stdout + p.stderr, findings


def _changes(findings: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in findings:
        if f["details"].get("change") and f["severity"] != "note":
            out.setdefault(f["details"]["change"], set()).add(f["kind"])
    return out


def _differential(findings: list[dict]) -> str:
    return next(f["message"] for f in findings if f["kind"] == "differential")


@pytest.mark.slow
def test_debt_on_one_config_stays_debt_when_the_change_shifts_the_turns(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The base's widest block drops the tail (debt). The change only drops the smallest block from
    the list: the head's turns fall on the widest block on other cases than the base's did. Judged
    on its own turns the base passed those cases, and the head's failures there were called new
    (red); on the head's configs the base's code fails them the same way: pre-existing, green."""
    code, text, findings = _pr(make_repo, _kernel(ALL, SHORT_AT_256), _kernel(WITHOUT_64, SHORT_AT_256))
    assert code == 0, text
    changes = _changes(findings)
    assert "new" not in changes and "mismatch" in changes["pre-existing"], findings
    note = _differential(findings)
    assert "the base's code was judged on the head's configs" in note, note
    # the disguised replay's program autotunes as production does, which Triton's interpreter cannot
    # (no driver to time with): said so, not called a kernel that behaves differently outside the gate
    assert not [f for f in findings if f["kind"] == "gate-aware"], findings
    assert any("the disguised replay did not run" in f["message"] and "interpreter cannot autotune" in f["message"]
               for f in findings if f["severity"] == "note"), findings


@pytest.mark.slow
def test_a_change_that_breaks_a_config_is_new_on_the_same_config(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the base's three blocks are right; the change drops the smallest and breaks the
    widest. On the head's configs the base's code passes: the failures are new, and block."""
    code, text, findings = _pr(make_repo, _kernel(ALL, RIGHT), _kernel(WITHOUT_64, SHORT_AT_256))
    assert code == 1, text
    assert _changes(findings).get("new") == {"mismatch"}, findings
    assert "pre-existing" not in _changes(findings), findings
    assert "the base's code was judged on the head's configs" in _differential(findings)


@pytest.mark.slow
def test_a_config_the_base_does_not_have_is_judged_against_the_bases_own(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The change adds a block size the base's list lacks, and breaks it: the base's code cannot run
    it, its own configs pass, and the head's failures on the new config are new."""
    added = ALL + ', triton.Config({"BLOCK": 512})'
    code, text, findings = _pr(make_repo, _kernel(ALL, RIGHT),
                               _kernel(added, "offs < n if BLOCK != 512 else offs < (n // 16) * 16"))
    assert code == 1, text
    assert _changes(findings).get("new") == {"mismatch"}, findings
    assert "could not run the head's autotune configs" in _differential(findings), _differential(findings)


def test_a_config_asked_for_answers_for_that_call_only() -> None:
    """The worker's side, driven as Triton reads its cache: a key asked for is answered with the asked
    config where the kernel's list has it (without being kept), with its own otherwise; every key's
    config is recorded for the call."""
    from gpu_gate.worker import autotune

    class Tuner:  # the parts of an Autotuner the cache reads
        def __init__(self) -> None:
            self.configs = ["BLOCK: 64", "BLOCK: 128", "BLOCK: 256"]
            self.base_fn = type("_k", (), {"__name__": "_k"})

    tuner = Tuner()
    cache = autotune._Configs(tuner, {(10,): "BLOCK: 64"})
    with autotune.per_call({"_k": {"(10,)": "BLOCK: 256", "(20,)": "BLOCK: 128", "(30,)": "BLOCK: 512"}}) as ran:
        assert (10,) in cache and cache[(10,)] == "BLOCK: 256"
        assert (20,) in cache and cache[(20,)] == "BLOCK: 128"  # never settled by the base: asked all the same
        assert (30,) not in cache  # the list has no such config: the autotuner's own turn
    assert ran == {"_k": {"(10,)": "BLOCK: 256", "(20,)": "BLOCK: 128"}}
    with autotune.per_call() as ran:
        assert cache[(10,)] == "BLOCK: 64" and (20,) not in cache  # its own again
    assert ran == {"_k": {"(10,)": "BLOCK: 64"}}
    assert cache[(10,)] == "BLOCK: 64"  # outside a call: nothing recorded, nothing asked


# --- the determinism check: the base's repeats on the head's configs ---------------------------------

# The widest block adds what differs from run to run (as atomics or a race do): 0 on one call, 1e-3 on
# the next. VARIES says whether it does.
VARYING = KERNEL.replace("def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):",
                         "def _double_kernel(x_ptr, out_ptr, n, salt, BLOCK: tl.constexpr):").replace(
    "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)\n",
    "    y = tl.load(x_ptr + offs, mask=m) * 2.0\n    if BLOCK == 256:\n        y = y + salt * VARIES\n"
    "    tl.store(out_ptr + offs, y, mask=m)\n").replace(
    "    _double_kernel[lambda meta: (triton.cdiv(x.numel(), meta[\"BLOCK\"]),)](x, out, x.numel())\n",
    "    CALLS.append(1)\n"
    "    _double_kernel[lambda meta: (triton.cdiv(x.numel(), meta[\"BLOCK\"]),)](x, out, x.numel(), "
    "1e-3 * (len(CALLS) % 2))\n").replace("CONFIGS = [", "CALLS = []\nCONFIGS = [")


def _determinism(tmp: Path, base: str, head: str) -> list[dict]:
    """The determinism job of a pull request (the executor, on the CPU): its nondeterministic findings."""
    import dataclasses

    from gpu_gate.executor import job as executor
    from gpu_gate.executor.options import ExecOptions
    from gpu_gate.executor.scheduling import execute
    from gpu_gate.protocol.jobs import DIFFERENTIAL, Job, SpecRef

    roots = {}
    for side, text in (("head", head), ("base", base)):
        root = tmp / side
        (root / "mylib").mkdir(parents=True)
        (root / "mylib" / "__init__.py").write_text("")
        (root / "mylib" / "double.py").write_text(text)
        (root / "gate").mkdir()
        (root / "gate" / "double_gate.py").write_text(SPEC)
        roots[side] = root
    job = Job(id="determinism:gate/double_gate.py::double_gate", check="determinism", level="required", kernels=(),
              spec=SpecRef("gate/double_gate.py", "double_gate"), seed=7,
              options={"repeats": 3, "contention": False, DIFFERENTIAL: "b" * 40})
    (tmp / "work").mkdir()
    # the executor runs determinism on a GPU only; the check itself runs on the CPU too
    checks = dict(executor.CHECKS)
    checks["determinism"] = dataclasses.replace(checks["determinism"], needs_gpu=False)
    saved, executor.CHECKS = executor.CHECKS, checks  # type: ignore[assignment]
    try:
        [result] = execute([job], ExecOptions(repo_root=roots["head"], base_root=roots["base"], gpus=(),
                                              timeout_s=300, work_root=tmp / "work"))
    finally:
        executor.CHECKS = saved
    assert result.status.value != "error", result
    return [f.to_json() for f in result.findings if f.kind == "nondeterministic"]


@pytest.mark.slow
def test_a_config_that_varies_at_the_base_too_is_debt_when_the_turns_shift(tmp_path: Path) -> None:
    """The base's widest block varies from run to run (debt); the change drops the smallest block. The
    head's repeats vary where its turn fell on the widest block; the base's code, repeated on its own
    turn there (another block), agreed, and the head's varying runs were called new. Repeated on the
    head's configs it varies as much: pre-existing."""
    base = VARYING.replace("CONFIG_LIST", ALL).replace("TAIL_256", RIGHT).replace("VARIES", "1.0")
    head = VARYING.replace("CONFIG_LIST", WITHOUT_64).replace("TAIL_256", RIGHT).replace("VARIES", "1.0")
    found = _determinism(tmp_path, base, head)
    assert found and {f["details"]["change"] for f in found} == {"pre-existing"}, found


@pytest.mark.slow
def test_a_change_that_makes_a_config_vary_is_new_on_the_same_config(tmp_path: Path) -> None:
    """The twin: no block of the base's varies; the change drops the smallest and makes the widest
    vary. On the head's configs the base's repeats agree: new."""
    base = VARYING.replace("CONFIG_LIST", ALL).replace("TAIL_256", RIGHT).replace("VARIES", "0.0")
    head = VARYING.replace("CONFIG_LIST", WITHOUT_64).replace("TAIL_256", RIGHT).replace("VARIES", "1.0")
    found = _determinism(tmp_path, base, head)
    assert found and {f["details"]["change"] for f in found} == {"new"}, found


@pytest.mark.slow
def test_an_autotuned_kernel_checked_without_a_base_is_not_called_gate_aware(make_repo) -> None:  # type: ignore[no-untyped-def]
    """`check --all` on the CPU: the disguised replay's program autotunes as production does, which
    the interpreter cannot ("0 active drivers"). Read as the kernel failing outside the gate, every
    autotuned kernel was a blocking `gate-aware` finding here; a right one is green, and the replay
    says why it did not run."""
    r = make_repo("tlib", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/double.py": _kernel(ALL, RIGHT),
                           "gate/double_gate.py": SPEC})
    p = _gate("check", "--all", "--cpu", cwd=r.path)
    results = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())
    findings = [f for res in results["results"] if res["check"] == "equivalence" for f in res["findings"]]
    assert p.returncode == 0, p.stdout + p.stderr
    assert not [f for f in findings if f["kind"] == "gate-aware"], findings
    assert any("interpreter cannot autotune" in f["message"] for f in findings if f["severity"] == "note"), findings
