"""The sanitizer check against fake compute-sanitizer programs (real subprocesses)."""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

import pytest

from gpu_gate import proc
from gpu_gate.judge.checks import sanitizer as check
from gpu_gate.cuda import sanitizer as cs
from gpu_gate.findings import Finding, Severity, Status
from gpu_gate.protocol.jobs import Job, SpecRef

DATA = Path(__file__).parent.parent / "data" / "sanitizer"

FAKE = '''#!{python}
import os, pathlib, shutil, subprocess, sys, time
args = sys.argv[1:]
if args == ["--help"]:
    print(os.environ.get("FAKE_HELP", "General options:\\n  --tool arg (=memcheck)   Set the tool to use."))
    sys.exit(0)
if args == ["--version"]:
    print("NVIDIA (R) Compute Sanitizer\\nCopyright (c) 2020-2025 NVIDIA Corporation\\nVersion 2025.3.1.0 (build 1) (public-release)")
    sys.exit({version_rc})
mode = os.environ.get("FAKE_MODE", "clean")
save = pathlib.Path(args[args.index("--save") + 1])
if mode == "hang":
    time.sleep(60)
if mode == "crash":
    sys.exit(3)
if mode == "unsupported":
    print("========= Error: Device not supported")
    sys.exit(1)
if mode == "garbage":
    save.write_text("<ComputeSanitizerOutput><record>")
    sys.exit(0)
if mode == "errors":
    shutil.copy(os.environ["FAKE_XML"], save)
    sys.exit(int(args[args.index("--error-exitcode") + 1]))
if mode == "silent-errors":
    save.write_text("<ComputeSanitizerOutput></ComputeSanitizerOutput>")
    sys.exit(int(args[args.index("--error-exitcode") + 1]))
save.write_text('<?xml version="1.0" encoding="utf-8"?>\\n<ComputeSanitizerOutput>\\n</ComputeSanitizerOutput>\\n')
inner = args[args.index("--show-backtrace") + 2:]
while inner and inner[0].startswith("--"):
    inner = inner[2:]
sys.exit(subprocess.call(inner))
'''


@dataclasses.dataclass
class Ctx:
    repo_root: Path
    has_gpu: bool | None = True
    sanitizer_path: str | None = None


@dataclasses.dataclass
class Inner:
    status: Status
    findings: list[Finding] = dataclasses.field(default_factory=list)
    cases: int = 3
    reason: str | None = None
    extra: dict[str, object] = dataclasses.field(default_factory=dict)


def _fake(directory: Path, version_rc: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "compute-sanitizer"
    path.write_text(FAKE.format(python=sys.executable, version_rc=version_rc))
    path.chmod(0o755)
    return path


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "k.cu").write_text(
        'template <int N> __global__ void tail_oob(float* x) {}\nextern "C" __global__ void smem_race(int* y) {}\n')
    (root / "kern.py").write_text("import triton\n@triton.jit\ndef triton_add(x_ptr):\n    pass\n")
    return root


@pytest.fixture()
def fake_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake = _fake(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    return fake


def _job(tool: str = "memcheck", **options: object) -> Job:
    return Job(id=f"{tool}-1", check=tool, level="required", kernels=("csrc/k.cu", "kern.py"),
               spec=SpecRef("gate/k_gate.py", "k_gate"), options=dict(options))


# --- locate -----------------------------------------------------------------


def test_locate_finds_path_entry_and_reads_its_version(fake_on_path: Path) -> None:
    found = cs.locate(None)
    assert found is not None and (found.path, found.version) == (str(fake_on_path), "2025.3.1.0")
    assert found.version_tuple == (2025, 3, 1, 0)
    assert found.supports("--tool") and not found.supports("--initcheck-track-filtered-global-memory")


def test_locate_honours_the_policy_path_and_never_falls_back(fake_on_path: Path, tmp_path: Path) -> None:
    other = _fake(tmp_path / "policy")
    found = cs.locate(str(other))
    assert found is not None and found.path == str(other)
    assert cs.locate(str(tmp_path / "nowhere" / "compute-sanitizer")) is None


def test_locate_skips_a_sanitizer_that_does_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = _fake(tmp_path / "broken", version_rc=1)
    assert cs.locate(str(broken)) is None


def test_wheel_layout_is_a_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake(tmp_path / "site" / "nvidia" / "cu13" / "bin")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    (tmp_path / "site" / "nvidia").mkdir(exist_ok=True)
    assert fake in cs.candidates(None)


def test_options_from_a_real_help_text() -> None:
    options = cs.parse_options((DATA / "help_2026.4.txt").read_text())
    assert {"--kernel-name", "--kernel-name-exclude", "--racecheck-report", "--launch-count", "--help",
            "--initcheck-track-filtered-global-memory", "--require-cuda-init"} <= options
    assert "--no-such-option" not in options and "--" not in options


def test_version_parsing() -> None:
    assert cs.parse_version("Version 2026.4.0.0 (build 39022338) (public-release)") == "2026.4.0.0"
    assert cs.parse_version("nothing here") is None


# --- argv -------------------------------------------------------------------


def test_argv_one_kernel_filter_per_kernel_and_tool_specific_options() -> None:
    opts = cs.Options("racecheck", "/w/racecheck.xml", ("a", "b"), print_limit=5, launch_timeout=30)
    argv = cs.argv("cs", opts, ["python", "-m", "gpu_gate.judge.job", "job.json", "result.json"])
    assert argv[:11] == ["cs", "--tool", "racecheck", "--error-exitcode", "86", "--xml", "--save", "/w/racecheck.xml",
                         "--print-limit", "5", "--launch-timeout"]
    assert argv[-9:] == ["--kernel-name", "kns=a", "--kernel-name", "kns=b",
                         "python", "-m", "gpu_gate.judge.job", "job.json", "result.json"]
    assert argv[argv.index("--racecheck-report") + 1] == "analysis"
    assert argv[argv.index("--target-processes") + 1] == "all"
    assert argv[argv.index("--check-exit-code") + 1] == "no"
    assert "--leak-check" not in argv
    mem = cs.argv("cs", cs.Options("memcheck", "x.xml", ("a",), leak_check=True), ["p"])
    assert mem[mem.index("--leak-check") + 1] == "full" and "--racecheck-report" not in mem
    with pytest.raises(ValueError, match="unknown compute-sanitizer tool 'asan'"):
        cs.argv("cs", cs.Options("asan", "x.xml"), ["p"])


# --- wrap -------------------------------------------------------------------


def test_wrap_without_a_gpu_is_not_run_before_anything_else(repo: Path, tmp_path: Path) -> None:
    out = check.wrap(_job(path=str(tmp_path / "missing")), tmp_path, Ctx(repo, has_gpu=False))
    assert out.status is Status.NOT_RUN and out.reason == "no GPU: compute-sanitizer needs a CUDA device"


def test_wrap_with_no_sanitizer_fails_closed(repo: Path, tmp_path: Path) -> None:
    out = check.wrap(_job(path=str(tmp_path / "missing" / "compute-sanitizer")), tmp_path, Ctx(repo))
    assert out.status is Status.ERROR
    [finding] = out.findings
    assert (finding.kind, finding.severity) == ("tool-missing", Severity.ERROR)
    assert "checks.memcheck.path" in finding.message


def test_wrap_builds_env_and_filters_from_covered_sources(repo: Path, tmp_path: Path, fake_on_path: Path) -> None:
    workdir = tmp_path / "job" / "w"
    argv = check.wrap(_job("racecheck"), workdir, Ctx(repo))
    assert isinstance(argv, list)
    cs_at = argv.index(str(fake_on_path))
    assert argv[1:cs_at] == ["PYTORCH_NO_CUDA_MEMORY_CACHING=1"]  # nothing that names gpu-gate
    assert _filters(argv) == ["kns=smem_race", "kns=tail_oob", "kns=triton_add"]
    # the report lies beside the worker's directory, in the job's directory that its sandbox hides
    assert argv[argv.index("--save") + 1] == str(tmp_path / "job" / "racecheck.w.xml")
    assert argv[-2:] == ["--kernel-name", "kns=triton_add"]  # the executor appends the worker's sandbox


def _filters(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--kernel-name"]


def test_initcheck_filters_only_where_the_tool_tracks_filtered_writes(
        repo: Path, tmp_path: Path, fake_on_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = check.wrap(_job("initcheck"), tmp_path, Ctx(repo))
    assert _filters(old) == [] and "--initcheck-track-filtered-global-memory" not in old
    monkeypatch.setenv("FAKE_HELP", "Initcheck-specific options:\n  --initcheck-track-filtered-global-memory arg (=yes)")
    new = check.wrap(_job("initcheck"), tmp_path, Ctx(repo))
    assert new[new.index("--initcheck-track-filtered-global-memory") + 1] == "yes"
    assert _filters(new) == ["kns=smem_race", "kns=tail_oob", "kns=triton_add"]


def test_wrap_without_any_kernel_name_refuses_an_unfiltered_run(repo: Path, tmp_path: Path, fake_on_path: Path) -> None:
    job = dataclasses.replace(_job(), kernels=("README.md",))
    out = check.wrap(job, tmp_path, Ctx(repo))
    assert out.status is Status.ERROR and [f.kind for f in out.findings] == ["no-kernel-names"]


# --- collect (real subprocesses through proc.run) -----------------------------


def _run(repo: Path, workdir: Path, mode: str, monkeypatch: pytest.MonkeyPatch, timeout: float = 30,
         inner_rc: int = 0, tool: str = "memcheck", xml: str = "memcheck_cuda_tail_bug_real.xml") -> proc.ProcResult:
    monkeypatch.setenv("FAKE_MODE", mode)
    monkeypatch.setenv("FAKE_XML", str(DATA / xml))
    tool_argv = check.wrap(_job(tool), workdir, Ctx(repo))
    return proc.run([*tool_argv, sys.executable, "-c", f"import sys; sys.exit({inner_rc})"], timeout=timeout)


def test_clean_run_passes_with_the_inner_outcome(repo: Path, tmp_path: Path, fake_on_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(repo, tmp_path, "clean", monkeypatch)
    assert res.returncode == 0
    out = check.collect(_job(), tmp_path, res, Inner(Status.PASSED, cases=3))
    assert (out.status, out.findings, out.cases) == (Status.PASSED, [], 3)


def test_errors_become_findings_and_fail(repo: Path, tmp_path: Path, fake_on_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(repo, tmp_path, "errors", monkeypatch)
    assert res.returncode == cs.ERROR_EXITCODE
    inner_note = Finding("memcheck", "refused", "candidate refused a strided input", Severity.WARNING)
    out = check.collect(_job(), tmp_path, res, Inner(Status.PASSED, [inner_note]))
    assert out.status is Status.FAILED
    assert [f.kind for f in out.findings] == ["invalid-global-read", "refused"]
    assert out.findings[0].spec == "gate/k_gate.py::k_gate"
    assert out.findings[0].details["count"] == 24


def test_reports_in_kernels_not_under_test_are_set_aside(repo: Path, tmp_path: Path, fake_on_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(repo, tmp_path, "errors", monkeypatch, tool="synccheck", xml="synccheck_divergent_barrier_real.xml")
    out = check.collect(_job("synccheck"), tmp_path, res, Inner(Status.PASSED))
    assert [(f.kind, f.severity) for f in out.findings] == [("other-kernels", Severity.NOTE)]
    assert out.status is Status.PASSED


def test_racecheck_real_sample_through_the_whole_path(repo: Path, tmp_path: Path, fake_on_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(repo, tmp_path, "errors", monkeypatch, tool="racecheck", xml="racecheck_real.xml")
    out = check.collect(_job("racecheck"), tmp_path, res, Inner(Status.PASSED))
    assert out.status is Status.FAILED and [f.kind for f in out.findings] == ["race"]


@pytest.mark.parametrize(
    ("mode", "kind"),
    [("crash", "sanitizer-crash"), ("unsupported", "device-not-supported"), ("garbage", "unreadable-output"),
     ("silent-errors", "unreported-error")],
)
def test_tool_failures_fail_closed(repo: Path, tmp_path: Path, fake_on_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   mode: str, kind: str) -> None:
    res = _run(repo, tmp_path, mode, monkeypatch)
    out = check.collect(_job(), tmp_path, res, Inner(Status.PASSED))
    assert out.status is Status.ERROR
    assert out.findings[0].kind == kind and out.findings[0].severity is Severity.ERROR


def test_hang_is_a_timeout_finding(repo: Path, tmp_path: Path, fake_on_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(repo, tmp_path, "hang", monkeypatch, timeout=1.5)
    assert res.timed_out
    out = check.collect(_job(), tmp_path, res, None)
    assert out.status is Status.ERROR and out.findings[0].kind == "timeout"


def test_missing_harness_result_fails_closed(repo: Path, tmp_path: Path, fake_on_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(repo, tmp_path, "clean", monkeypatch, inner_rc=1)
    out = check.collect(_job(), tmp_path, res, None)
    assert out.status is Status.ERROR and out.findings[0].kind == "no-result"


def test_failed_inner_outcome_is_kept(repo: Path, tmp_path: Path, fake_on_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(repo, tmp_path, "clean", monkeypatch, inner_rc=1)
    boom = Finding("memcheck", "exception", "RuntimeError: CUDA error: an illegal memory access was encountered")
    out = check.collect(_job(), tmp_path, res, Inner(Status.ERROR, [boom], reason="exception in case c0001"))
    assert out.status is Status.ERROR and out.findings == [boom]


# --- differential: the base's code under the same tool -------------------------------------------


def _tree(root: Path, kernel_source: str) -> Path:
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "k.cu").write_text(kernel_source)
    (root / "kern.py").write_text("import triton\n")
    return root


TAIL = ('extern "C" __global__ void tail_oob(const float* x, float* y, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    float v = x[i];\n"
        "    if (i < n) y[i] = 2.0f * v;\n"
        "}\n")


def _xml_at(tmp_path: Path, root: Path, line: int, name: str) -> str:
    """The real memcheck sample, pointing at ``csrc/k.cu:line`` under ``root`` (as the tool prints it)."""
    text = (DATA / "memcheck_cuda_tail_bug_real.xml").read_text()
    text = text.replace("/home/ci/project/tests/gpu/kernels/tail.cu", str(root / "csrc" / "k.cu"))
    text = text.replace("<line>4</line>", f"<line>{line}</line>")
    path = tmp_path / name
    path.write_text(text)
    return path.name


def _side(root: Path, workdir: Path, mode: str, xml: str, monkeypatch: pytest.MonkeyPatch) -> proc.ProcResult:
    workdir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("FAKE_MODE", mode)
    monkeypatch.setenv("FAKE_XML", str(xml))
    tool_argv = check.wrap(_job(), workdir, Ctx(root))
    return proc.run([*tool_argv, sys.executable, "-c", "pass"], timeout=30)


def _differential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, head: tuple[str, str, int],
                  base: tuple[str, str, int]) -> tuple[object, list[Finding]]:
    """``head`` and ``base``: (kernel source, fake mode, line the reports point at)."""
    roots = {"head": _tree(tmp_path / "head", head[0]), "base": _tree(tmp_path / "base", base[0])}
    job = _job(base_commit="b" * 40)
    runs = {}
    for side, (_, mode, line) in (("head", head), ("base", base)):
        xml = tmp_path / _xml_at(tmp_path, roots[side], line, f"{side}.xml")
        runs[side] = _side(roots[side], tmp_path / "job" / side, mode, str(xml), monkeypatch)
    out = check.collect(job, tmp_path / "job" / "head", runs["head"], Inner(Status.PASSED),
                        check.BaseRun(tmp_path / "job" / "base", runs["base"], roots["base"]))
    return out, [f for f in out.findings if f.kind != "differential"]


def test_a_report_the_base_has_too_is_pre_existing_even_where_the_change_moved_its_line(
        tmp_path: Path, fake_on_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moved = "// a comment the change added\n" + TAIL
    out, findings = _differential(tmp_path, monkeypatch, (moved, "errors", 4), (TAIL, "errors", 3))
    assert [(f.kind, f.details["change"]) for f in findings] == [("invalid-global-read", "pre-existing")]
    assert findings[0].message.startswith("pre-existing")
    note = next(f for f in out.findings if f.kind == "differential")
    assert "0 new, 1 pre-existing and 0 fixed" in note.message and note.severity is Severity.NOTE


def test_a_report_the_base_lacks_is_new(tmp_path: Path, fake_on_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = TAIL.replace("    float v = x[i];\n    if (i < n) y[i] = 2.0f * v;\n", "    if (i < n) y[i] = 2.0f * x[i];\n")
    out, findings = _differential(tmp_path, monkeypatch, (TAIL, "errors", 3), (clean, "clean", 3))
    assert [(f.kind, f.details["change"], f.severity) for f in findings] == [
        ("invalid-global-read", "new", Severity.ERROR)]
    assert out.status is Status.FAILED


def test_the_same_kind_in_the_same_kernel_on_an_edited_line_is_new(tmp_path: Path, fake_on_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The base overruns x; the change makes the kernel overrun through another pointer as well,
    # on the line the report now points at: not the base's report.
    worse = TAIL.replace("    float v = x[i];\n", "    float v = x[i + n];\n")
    _, findings = _differential(tmp_path, monkeypatch, (worse, "errors", 3), (TAIL, "errors", 3))
    assert [f.details["change"] for f in findings if f.severity is Severity.ERROR] == ["new"]
    assert [f.details["change"] for f in findings if f.severity is Severity.NOTE] == ["fixed"]


def test_a_report_the_change_removed_is_fixed(tmp_path: Path, fake_on_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    clean = TAIL.replace("    float v = x[i];\n    if (i < n) y[i] = 2.0f * v;\n", "    if (i < n) y[i] = 2.0f * x[i];\n")
    out, findings = _differential(tmp_path, monkeypatch, (clean, "clean", 3), (TAIL, "errors", 3))
    assert [(f.kind, f.details["change"], f.severity) for f in findings] == [
        ("invalid-global-read", "fixed", Severity.NOTE)]
    assert findings[0].message.startswith("fixed by this change")
    assert out.status is Status.PASSED


def test_a_base_the_tool_could_not_check_leaves_every_report_new(tmp_path: Path, fake_on_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    out, findings = _differential(tmp_path, monkeypatch, (TAIL, "errors", 3), (TAIL, "crash", 3))
    assert [(f.details["change"], f.severity) for f in findings] == [("new", Severity.ERROR)]
    note = next(f for f in out.findings if f.kind == "differential")
    assert "not compared with the base's code" in note.message and "sanitizer" in note.message


def test_the_cases_under_the_tool_keep_the_bases_spec_and_the_bases_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """The equivalence engine drives the cases under the tool: it must still be told which base's
    code runs them beside the head's, and which spec (the base's) judges them."""
    from gpu_gate.judge.checks import equivalence

    seen: list[Job] = []
    monkeypatch.setattr(equivalence, "run", lambda job, ctx: seen.append(job))
    carried = {"file": "gate/k_gate.py", "name": "k_gate", "source": "# the base's spec\n"}
    job = _job(base_commit="b" * 40, base_spec=carried, equivalence={"cases": 64, "growth": False}, cases=3)
    check.run(job, Ctx(Path(".")))
    (driven,) = seen
    assert driven.options["base_commit"] == "b" * 40 and driven.options["base_spec"] == carried
    assert driven.options["cases"] == 3 and driven.options["sanitizer"] == "memcheck"
    assert driven.options["growth"] is False
