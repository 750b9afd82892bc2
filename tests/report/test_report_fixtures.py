"""A realistic run record shared by the reporter tests, and checks that it means what they assume.

The record is written to results.json and read back, as ``gpu-gate report`` does, so the
reporters are tested on deserialised data.
"""
from __future__ import annotations

from pathlib import Path

from gpu_gate.findings import Finding, JobResult, Severity, Status
from gpu_gate.job_extra import JobExtra
from gpu_gate.record import ChangedKernel, RunRecord
from gpu_gate.verdict import Rules, Verdict, decide

RMS = "gate/rmsnorm_gate.py::rmsnorm_gate"
ROWSUM = "gate/rowsum_gate.py::rowsum_gate"
CACHED_SHA = "4f2a9c1d0b7e6f5a4c3b2a1908f7e6d5c4b3a291"

MISMATCH = (
    "Tensor-likes are not close!\n\n"
    "Mismatched elements: 3 / 100 (3.0%)\n"
    "Greatest absolute difference: 0.0625 at index (2, 7) (up to 0.0078125 allowed)\n"
    "Greatest relative difference: 0.5 at index (2, 7) (up to 0.016 allowed)\n"
    "input: x float32[4, 25] transposed, distribution=large_offset, seed=1234"
)
REPRO = "gpu-gate repro 'gate/rmsnorm_gate.py::rmsnorm_gate' --check equivalence --case c0017 --seed 1234"
LOG_TAIL = ("step 1 ok\n\x1b[31mKernel hung\x1b[0m waiting on barrier\x00\x07\n"
            "Traceback (most recent call last):\n  File \"mylib/rowsum.py\", line 12\nTimeoutError")
NO_GPU = "no GPU: torch.cuda.is_available() is False"
GROWTH = {
    "dim": "n", "dtype": "bfloat16",
    "rows": [{"size": 256, "candidate": 1e-3, "baseline": 8e-4},
             {"size": 4096, "candidate": 1.2e-2, "baseline": 2e-3},
             {"size": 262144, "candidate": 0.9, "baseline": 5e-3}],
    "slope_candidate": 0.9, "slope_baseline": 0.5, "flagged": True,
}
RESOURCES = [
    {"kernel": "rmsnorm_fwd", "arch": "sm_90", "registers": 40, "spill_store": 0, "spill_load": 0,
     "local_bytes": 0, "shared_bytes": 1024},
    {"kernel": "rmsnorm_bwd", "arch": "sm_90", "registers": 255, "spill_store": 16, "spill_load": 24,
     "local_bytes": 64, "shared_bytes": 4096},
]


def _kernels() -> list[ChangedKernel]:
    return [
        ChangedKernel("csrc/rmsnorm.cu", "cuda", "modified", specs=(RMS,)),
        ChangedKernel("mylib/rowsum.py", "triton", "modified", specs=(ROWSUM,)),
        ChangedKernel("csrc/scatter.cu", "cuda", "added"),
    ]


def _results() -> list[JobResult]:
    return [
        JobResult("compile:csrc/rmsnorm.cu", "compile", Status.PASSED, kernels=("csrc/rmsnorm.cu",),
                  duration_s=1.25, extra=JobExtra(resources=RESOURCES)),
        JobResult(f"equivalence:{RMS}", "equivalence", Status.FAILED, spec=RMS, kernels=("csrc/rmsnorm.cu",),
                  duration_s=4.1, cases=64, extra=JobExtra(growth=GROWTH), findings=[
                      Finding("equivalence", "mismatch", MISMATCH, spec=RMS, case="c0017",
                              file="csrc/rmsnorm.cu", line=42, repro=REPRO),
                      Finding("equivalence", "nan", "NaN in output where the reference is finite (12 elements)",
                              spec=RMS, case="c0031", repro=REPRO.replace("c0017", "c0031")),
                  ]),
        JobResult(f"equivalence:{ROWSUM}", "equivalence", Status.ERROR, spec=ROWSUM, kernels=("mylib/rowsum.py",),
                  duration_s=600.0, reason="timed out after 600 s (process group killed)", log_tail=LOG_TAIL),
        JobResult(f"memcheck:{RMS}", "memcheck", Status.NOT_RUN, spec=RMS, kernels=("csrc/rmsnorm.cu",),
                  reason=NO_GPU),
        JobResult(f"initcheck:{RMS}", "initcheck", Status.FAILED, level="advisory", spec=RMS,
                  kernels=("csrc/rmsnorm.cu",), duration_s=9.5, cases=4, findings=[
                      Finding("initcheck", "uninitialized", "Uninitialized __global__ memory read of size 4 bytes",
                              spec=RMS, file="csrc/rmsnorm.cu", line=57),
                  ]),
        JobResult(f"racecheck:{RMS}", "racecheck", Status.PASSED, spec=RMS, kernels=("csrc/rmsnorm.cu",),
                  duration_s=7.4, cases=4, cached_from=CACHED_SHA),
    ]


def build_record(tmp_path: Path) -> RunRecord:
    record = RunRecord(
        base="0123456789abcdef0123456789abcdef01234567", head="89abcdef0123456789abcdef0123456789abcdef",
        policy_source=".gpu-gate.yml", kernels=_kernels(), results=_results(),
        plan_findings=[Finding("plan", "uncovered", "csrc/scatter.cu changed and no gate spec covers it",
                               file="csrc/scatter.cu")],
        planned_jobs=[r.job_id for r in _results()] + [f"synccheck:{ROWSUM}"],
    )
    path = tmp_path / "results.json"
    record.write(path)
    return RunRecord.read(path)


def build(tmp_path: Path) -> tuple[RunRecord, Verdict]:
    record = build_record(tmp_path)
    return record, decide(record, Rules())


def test_fixture_blocks_on_what_the_reporter_tests_assume(tmp_path: Path) -> None:
    _, verdict = build(tmp_path)
    blocking = {(i.job.check if i.job else None, i.finding.kind if i.finding else None) for i in verdict.blocking}
    assert blocking == {(None, "uncovered"), ("equivalence", "mismatch"), ("equivalence", "nan"),
                        ("equivalence", None), ("memcheck", None), (None, None)}
    assert [i.finding.kind for i in verdict.warnings if i.finding] == ["uninitialized"]
    assert not verdict.passed


def test_fixture_log_tail_keeps_control_characters_through_json(tmp_path: Path) -> None:
    record = build_record(tmp_path)
    tail = next(r.log_tail for r in record.results if r.log_tail)
    assert "\x00" in tail and "\x1b[31m" in tail
    assert next(r for r in record.results if r.check == "initcheck").findings[0].severity is Severity.ERROR
