"""The policy as frozen, typed records. Validation rules live here; reading YAML does not."""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..judge.checks import CHECKS
from ..verdict import Rules

Level = Literal["required", "advisory", "off"]
DType = Literal[
    "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
    "int64", "int32", "int16", "int8", "uint8", "bool",
]
MiB = 1024 * 1024
_ARCH = re.compile(r"^(sm|compute)_\d{2,3}[af]?$")


def _level_from_bool(value: Any) -> Any:
    # YAML 1.1 reads a bare `off` as false and `on`/`yes` as true.
    if isinstance(value, bool):
        return "required" if value else "off"
    return value


def _arch(value: str) -> str:
    if not _ARCH.match(value):
        raise PydanticCustomError("arch", "'{arch}' is not a CUDA architecture", {"arch": value, "hint": "write e.g. sm_80 or sm_90a"})
    return value


def _check_shorthand(value: Any) -> Any:
    """`memcheck: required` means `memcheck: {level: required}`."""
    if isinstance(value, (str, bool)):
        return {"level": value}
    return value


def _inside_repository(value: str) -> str:
    """A glob of paths inside the repository: relative, with no `..` and nothing under `.git`."""
    parts = value.replace("\\", "/").split("/")
    if not value.strip() or value.startswith(("/", "~")) or ".." in parts or parts[0] == ".git":
        raise PydanticCustomError(
            "repo_glob", "'{glob}' is not a path inside the repository",
            {"glob": value, "hint": "write a glob relative to the repository root, e.g. mylib/_C*.so or build/lib*/**"})
    return value


LevelField = Annotated[Level, BeforeValidator(_level_from_bool, json_schema_input_type=Union[Level, bool])]
Arch = Annotated[str, AfterValidator(_arch)]
RepoGlob = Annotated[str, AfterValidator(_inside_repository)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CheckPolicy(_Frozen):
    level: LevelField = Field(default="required", description="required: blocks the merge; advisory: reported only; off: not run")

    def options(self) -> dict[str, Any]:
        """The check's settings as JSON data, for ``Job.options``."""
        return self.model_dump(mode="json", exclude={"level"})


class KernelSelection(_Frozen):
    include: tuple[str, ...] = Field(default=("**/*.cu", "**/*.cuh", "**/*.py"), description="globs of kernel files")
    exclude: tuple[str, ...] = Field(default=("third_party/**", ".git/**", ".github/**"),
                                     description="globs never treated as kernels")


class TritonCompile(_Frozen):
    signature: dict[str, str] | None = Field(
        default=None, description="argument types, e.g. {x_ptr: '*fp32', n: 'i32'} (default: guessed from names)")
    constexprs: dict[str, int | float | bool | str] = Field(
        default_factory=dict, description="values for tl.constexpr parameters without a default, e.g. {BLOCK: 1024}")


class CompilePolicy(CheckPolicy):
    archs: tuple[Arch, ...] = Field(default=("sm_80", "sm_90"), min_length=1, description="target architectures, e.g. sm_90")
    max_spill_bytes: int | None = Field(default=None, ge=0, description="most spill stores+loads allowed per kernel")
    max_local_bytes: int | None = Field(default=None, ge=0, description="most local memory allowed per thread")
    resources_level: Literal["required", "advisory"] = Field(
        default="advisory", description="whether breaching max_spill_bytes/max_local_bytes blocks")
    triton: dict[str, TritonCompile] = Field(
        default_factory=dict, description="per Triton kernel name: the signature and constexpr values to compile with")
    no_values: Literal["warn", "fail"] = Field(
        default="warn", description="a Triton kernel not compiled because no values are known for its constexprs or "
                                    "signature: warn (reported, does not block) or fail")


class Tolerance(_Frozen):
    baseline_factor: float = Field(default=2.0, gt=0, description="allowed error = factor x torch's own error in the kernel's dtype")
    atol: float | None = Field(default=None, ge=0, description="fixed elementwise rule |out - ref| <= atol + rtol x |ref| instead of the baseline rule (with rtol)")
    rtol: float | None = Field(default=None, ge=0, description="fixed elementwise rule |out - ref| <= atol + rtol x |ref| instead of the baseline rule (with atol)")

    @model_validator(mode="after")
    def _atol_rtol_together(self) -> Tolerance:
        if (self.atol is None) != (self.rtol is None):
            given, missing = ("atol", "rtol") if self.rtol is None else ("rtol", "atol")
            raise PydanticCustomError(
                "tolerance_pair", "{given} is set without {missing}",
                {"given": given, "missing": missing, "hint": "give atol and rtol together, or neither"})
        return self


FloatDist = Literal["normal", "uniform_pos", "offset", "heavy_tail", "peaked", "neg_inf_spans", "ties", "denormal"]
IndexDist = Literal["uniform", "zipf", "same", "sorted"]
Layout = Literal["contiguous", "transposed", "sliced", "narrowed", "expanded", "offset"]


class EquivalencePolicy(CheckPolicy):
    cases: int = Field(default=64, ge=1, description="fuzzed cases per spec")
    dtypes: tuple[DType, ...] | None = Field(default=None, min_length=1, description="dtypes to test; null: all the spec allows")
    seed: int | None = Field(default=None, description="fixed seed; null: a fresh seed per run (always recorded)")
    tolerance: Tolerance = Tolerance()
    max_case_bytes: int = Field(default=256 * MiB, ge=1, description="largest input+output size of one case")
    time_budget_s: float = Field(default=300.0, gt=0, description=(
        "gpu-gate's own time for the cases (the kernel's calls are counted apart): once spent, only the floor runs "
        "(every dtype and layout, at least 16 cases on a GPU, 4 on the CPU)"))
    candidate_budget_s: float | None = Field(default=None, gt=0, description=(
        "the kernel's calls may add up to this much on top of time_budget_s; null: as much as time_budget_s"))
    local_time_budget_s: float | None = Field(default=90.0, gt=0, description=(
        "a local run on the CPU (outside CI, where the Triton interpreter takes seconds a case): time_budget_s and "
        "candidate_budget_s are each at most this, so that the loop on one's own machine answers in minutes; the "
        "report says how many of the planned cases ran; null: as elsewhere"))
    stop_at_red: Literal["local", "always", "never"] = Field(default="local", description=(
        "stop running cases once the job is red for a failure that stood its confirmation (new against the base's "
        "code, outside its run-to-run range; a failure that shows by chance waits for the job's end): local: on a "
        "run outside CI; always; never: every case runs and every failing output is listed"))
    slow_case_s: float | None = Field(default=None, gt=0, description=(
        "a case whose kernel calls take longer is a slow-case finding; null: 10 s on a GPU, 60 s on the CPU"))
    slow_case: Literal["warn", "fail"] = Field(default="warn", description=(
        "slow-case findings: warn (the cases still run: slow is not wrong), or fail"))
    growth: bool = Field(default=True, description="check how the error grows with the reduction length")
    disguised_replay: bool = Field(default=True, description=(
        "run a few passed cases again in a process started like a user's program (no gpu-gate loaded or installed "
        "there): a kernel that behaves only inside the gate's worker is a gate-aware finding"))
    shrink: bool = Field(default=True, description="shrink a failing case to a minimal one")
    shrink_budget_s: float = Field(default=60.0, ge=0, description="time allowed for shrinking")
    dists: tuple[FloatDist, ...] | None = Field(default=None, min_length=1, description="float value distributions to use; null: all the spec allows")
    index_dists: tuple[IndexDist, ...] | None = Field(default=None, min_length=1, description="index distributions; null: all")
    layouts: tuple[Layout, ...] | None = Field(default=None, min_length=1, description="memory layouts; null: all the spec allows")
    max_reduction: int = Field(default=1 << 18, ge=2, description="longest reduction length fuzzed")
    shapes: tuple[dict[str, int], ...] = Field(default=(), description=(
        "production shapes that always run, each a mapping of dim name to size (e.g. {rows: 8192, hidden: 4096}): a "
        "spec runs every shape whose dims it has, in each of its dtypes, after the canonical case and on top of "
        "`cases`, up to 8 GiB per case on a GPU"))
    differential: bool = Field(default=True, description=(
        "on a pull request, also run the base's code on the same cases, so that a failure is classified as new, "
        "pre-existing or fixed, and a change that makes a kernel less accurate is caught"))
    regression_factor: float = Field(default=4.0, gt=1, description=(
        "differential runs: the head's error may be at most this many times the base's on the same case"))


class DeterminismPolicy(CheckPolicy):
    repeats: int = Field(default=8, ge=2, description="runs per case")
    concurrent_load: bool = Field(default=True, description="also run while other kernels load the GPU")
    contention: bool = Field(default=True, description=(
        "also run cases built for contention: many rows per lock or partial buffer, wide rows, Zipf-skewed indices"))
    contention_gib: float = Field(default=4.0, gt=0, description=(
        "GPU memory one contention case may take, in GiB (at most a third of the GPU's free memory)"))


class SanitizerPolicy(CheckPolicy):
    cases: int = Field(default=4, ge=1, description="cases run under compute-sanitizer")
    print_limit: int = Field(default=100, ge=1, description="compute-sanitizer --print-limit")
    launch_timeout_s: int = Field(default=60, ge=0, description="compute-sanitizer --launch-timeout")
    leak_check: bool = Field(default=False, description="memcheck --leak-check full")
    racecheck_report: Literal["all", "hazard", "analysis"] = Field(default="analysis", description="racecheck --racecheck-report")
    timeout_minutes: float = Field(default=20.0, gt=0, description="kill the sanitized run after this long")


class SpeedPolicy(CheckPolicy):
    level: LevelField = Field(default="off", description=(
        "off by default; advisory: the head's time against the base's in the report; required: a slow-down beyond "
        "threshold blocks"))
    cases: int = Field(default=2, ge=1, le=16, description="cases timed per spec (the largest plain ones, one per dtype first)")
    rounds: int = Field(default=10, ge=6, le=200, description=(
        "interleaved rounds per case (base then head, head then base, ...): each gives one pair of timings"))
    repeats: int = Field(default=5, ge=1, le=100, description="timed runs per side and round; the round's figure is their median")
    warmup: int = Field(default=3, ge=0, le=100, description="untimed runs per side before a case's first round")
    threshold: float = Field(default=0.05, ge=0, le=10, description=(
        "the slow-down allowed (0.05: 5%): slower is a finding when the whole confidence interval lies beyond it"))
    confidence: float = Field(default=0.95, gt=0.5, lt=1, description="confidence of the interval of head/base time")
    shapes: tuple[dict[str, int], ...] = Field(default=(), description=(
        "production shapes to time, each a mapping of dim name to size (e.g. {rows: 8192, hidden: 4096}): a spec "
        "times every shape whose dims it has, in each of its dtypes, before the largest fuzzed cases"))
    flush_l2: bool = Field(default=True, description="overwrite the GPU's L2 cache before each timed run")
    fresh_buffers: bool = Field(default=True, description=(
        "each timed run on new copies of the inputs (new addresses: no cache keyed by pointers helps)"))


def _check_doc(model: type[CheckPolicy]) -> str:
    return f"a level (required, advisory, off), or a mapping of {model.__name__} settings"


CompileField = Annotated[CompilePolicy, BeforeValidator(_check_shorthand, json_schema_input_type=Union[CompilePolicy, Level, bool])]
EquivalenceField = Annotated[EquivalencePolicy, BeforeValidator(_check_shorthand, json_schema_input_type=Union[EquivalencePolicy, Level, bool])]
DeterminismField = Annotated[DeterminismPolicy, BeforeValidator(_check_shorthand, json_schema_input_type=Union[DeterminismPolicy, Level, bool])]
SpeedField = Annotated[SpeedPolicy, BeforeValidator(_check_shorthand, json_schema_input_type=Union[SpeedPolicy, Level, bool])]
SanitizerField = Annotated[SanitizerPolicy, BeforeValidator(_check_shorthand, json_schema_input_type=Union[SanitizerPolicy, Level, bool])]


class Checks(_Frozen):
    """One field per registered check, in the registry's order."""

    # The registry (gpu_gate.judge.checks.CHECKS) names the fields, checked below: a name it does not
    # have is an unknown key (extra="forbid"), reported with the registry's names (policy.diagnostics).

    compile: CompileField = Field(default=CompilePolicy(), description=_check_doc(CompilePolicy))
    equivalence: EquivalenceField = Field(default=EquivalencePolicy(), description=_check_doc(EquivalencePolicy))
    determinism: DeterminismField = Field(default=DeterminismPolicy(), description=_check_doc(DeterminismPolicy))
    memcheck: SanitizerField = Field(default=SanitizerPolicy(), description=_check_doc(SanitizerPolicy))
    racecheck: SanitizerField = Field(default=SanitizerPolicy(), description=_check_doc(SanitizerPolicy))
    synccheck: SanitizerField = Field(default=SanitizerPolicy(), description=_check_doc(SanitizerPolicy))
    initcheck: SanitizerField = Field(default=SanitizerPolicy(level="advisory"), description=_check_doc(SanitizerPolicy))
    speed: SpeedField = Field(default=SpeedPolicy(), description=_check_doc(SpeedPolicy))

    @model_validator(mode="before")
    @classmethod
    def _keep_default_level(cls, data: Any) -> Any:
        # A mapping without `level` keeps that check's own default level (initcheck is advisory).
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, value in data.items():
            field = cls.model_fields.get(name) if isinstance(name, str) else None
            if field is not None and isinstance(value, dict) and "level" not in value:
                out[name] = {"level": field.default.level, **value}
        return out


if tuple(Checks.model_fields) != tuple(CHECKS):  # the schema and the registry name the same checks
    raise RuntimeError(f"the policy's checks {', '.join(Checks.model_fields)} are not the registry's "
                       f"{', '.join(CHECKS)} (gpu_gate.judge.checks)")


class CudaSettings(_Frozen):
    include_dirs: tuple[str, ...] = Field(default=(), description="extra -I directories, relative to the repository root")
    sanitizer: str | None = Field(default=None, description="path to compute-sanitizer; null: search the usual places")
    nvcc: str | None = Field(default=None, description="path to nvcc; null: search PATH and CUDA_HOME")
    nvcc_flags: tuple[str, ...] = Field(default=(), description="extra nvcc flags")


Tool = Literal["compute-sanitizer", "nvcc", "torch", "triton", "cupy"]


class RunnerHealth(_Frozen):
    """What `check` asks of a GPU before trusting it (the doctor's thresholds)."""

    max_temperature_c: int = Field(default=85, ge=1, le=150, description="hotter than this: the GPU is left out")
    min_free_memory_mib: int = Field(default=1024, ge=0, description="less free memory than this: the GPU is left out")
    allow_other_processes: bool = Field(default=False, description=(
        "tolerate other compute processes on the GPU (a shared GPU: timings and memory are then not the run's own)"))
    required_tools: tuple[Tool, ...] | None = Field(default=None, description=(
        "tools the runner must have; null: what the run needs (torch; compute-sanitizer for sanitizer checks; "
        "triton for Triton kernels; cupy for CUDA kernels)"))


class RunnerSettings(_Frozen):
    labels: tuple[str, ...] = Field(default=("self-hosted", "linux", "gpu"), min_length=1, description="runs-on labels of GPU runners")
    job_timeout_minutes: float = Field(default=30.0, gt=0, description="timeout of one job (spec x check)")
    run_timeout_minutes: float = Field(default=120.0, gt=0, description="timeout of the whole gate")
    gpus: Literal["all"] | int = Field(default="all", description="GPUs to use on a runner: all, or a count")
    fail_fast: bool = Field(default=False, description="stop at the first blocking failure")
    jobs_per_gpu: int = Field(default=8, ge=1, le=16, description=(
        "jobs sharing one GPU at once; a job starts only when the GPU has the free memory it needs. Each job "
        "runs two or three processes: on a runner with fewer than two CPU cores per job, lower it"))
    health: RunnerHealth = Field(default_factory=RunnerHealth, description="what a GPU must show before jobs run on it")
    sandbox: Literal["required", "auto", "off"] = Field(default="auto", description=(
        "run every job in a sandbox (bubblewrap, else unshare): required: no job runs without one; auto: use one "
        "where it works, else run unsandboxed with a sandbox-unavailable warning; off: never"))

    infrastructure: Literal["fail", "not_run"] = Field(default="not_run", description=(
        "a failure of the runner's tools that persists when the job is run again on the same inputs "
        "(compute-sanitizer crashing with no report, a sandbox under it that never starts): not_run: the check "
        "is not run, with the reason, and not_run decides; fail: it is an error that blocks a required check"))

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox(cls, value: Any) -> Any:
        return _level_from_bool(value)  # `sandbox: off` is YAML's false

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise PydanticCustomError(
            "gpus", "expected 'all' or a number of GPUs, got {got}", {"got": repr(value), "hint": "write gpus: all or gpus: 2"})


class CacheSettings(_Frozen):
    enabled: bool = Field(default=True, description="reuse results of unchanged kernel+spec+check")
    dir: str = Field(default=".gpu-gate/cache", description="cache directory, relative to the repository root")


class ReportSettings(_Frozen):
    sarif_notes: bool = Field(default=False, description=(
        "also put notes in report.sarif (checks not run here, dtypes not verified, the differential run's "
        "remarks): code scanning keeps each as an alert; by default SARIF carries what blocks and what warns"))


class Policy(_Frozen):
    """A whole `.gpu-gate.yml`, after `extends` has been merged in."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="gpu-gate policy (.gpu-gate.yml)")

    version: Literal[1] = Field(default=1, description="policy format version")
    extends: str | None = Field(default=None, description="preset (default, strict) or relative path of a YAML file to extend")
    kernels: KernelSelection = KernelSelection()
    specs: tuple[str, ...] = Field(default=("gate/**/*_gate.py", "**/*_gate.py"), description="globs of gate spec files")
    python_path: tuple[str, ...] | None = Field(default=None, description=(
        "directories, relative to the repository root, from which specs import the repository's packages; "
        "null: the package directories named in pyproject.toml (a src/ layout), else the root"))
    setup_outputs: tuple[RepoGlob, ...] = Field(default=(), description=(
        "globs, relative to the repository root, of the files that the setup commands build and the jobs need (a "
        "compiled extension): with --head (always in GitHub Actions) the jobs run an export of the head commit, "
        "and only these files are taken into it from the work tree; a file the head commit has keeps the "
        "commit's bytes"))
    uncovered: Literal["fail", "warn", "ignore"] = Field(default="fail", description="a changed kernel with no gate spec")
    not_run: Literal["fail", "warn"] = Field(default="fail", description="a required check that could not run")
    refusals: Literal["fail", "warn", "ignore"] = Field(default="warn", description="a kernel that refuses an input loudly (one the base's code ran and passed blocks "
                                                        "unless this is ignore)")
    unrecognised: Literal["fail", "warn"] = Field(default="fail", description=(
        "a changed file under kernels.include that uses a GPU module but defines no kernel gpu-gate recognises"))
    submodules: Literal["fail", "warn"] = Field(default="fail", description=(
        "a git submodule under kernels.include that moved: gpu-gate cannot see the kernels inside it"))
    preexisting: Literal["fail", "warn"] = Field(default="warn", description=(
        "a failure that the base's code has too, on the same case (differential runs): the repository's debt, "
        "reported in its own section; fail blocks the merge on it"))
    rule_changes: Literal["fail", "warn"] = Field(default="fail", description=(
        "a change that weakens the rules (this policy or a spec's reference, tolerance, dims, dtypes or checks); "
        "read from the base's policy: fail blocks the merge, warn reports it"))
    autotune: Literal["rotate", "timed"] = Field(default="rotate", description=(
        "Triton's @triton.autotune under the gate: rotate: each new key takes the next config of the kernel's "
        "list, untimed, so the cases reach every config and the base and the head run the same one (only the "
        "config that runs is compiled); timed: the autotuner compiles and times every config, as in production "
        "(slow: every fuzzed size is a new key). Without a GPU, configs are always taken in turn"))
    checks: Checks = Checks()
    cuda: CudaSettings = CudaSettings()
    runner: RunnerSettings = RunnerSettings()
    cache: CacheSettings = CacheSettings()
    reports: ReportSettings = ReportSettings()

    def check(self, name: str) -> CheckPolicy:
        if name not in CHECKS:
            raise KeyError(f"unknown check {name!r}; known: {', '.join(CHECKS)}")
        policy: CheckPolicy = getattr(self.checks, name)
        return policy

    def enabled_checks(self) -> list[tuple[str, CheckPolicy]]:
        return [(name, self.check(name)) for name in CHECKS if self.check(name).level != "off"]

    def rules(self) -> Rules:
        return Rules(uncovered=self.uncovered, not_run=self.not_run, refusals=self.refusals,
                     unrecognised=self.unrecognised, submodules=self.submodules, preexisting=self.preexisting)
