"""Loading `.gpu-gate.yml`: defaults, the DESIGN example, check shorthands, extends and merging."""
from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
import yaml

from gpu_gate.judge.checks import CHECKS
from gpu_gate.policy import (
    Checks,
    LoadedPolicy,
    Policy,
    SanitizerPolicy,
    default_policy,
    load_policy,
    preset_path,
    validate_policy_file,
)
from gpu_gate.verdict import Rules

DATA = Path(__file__).parent.parent / "data" / "policy"


def write(root: Path, text: str, name: str = ".gpu-gate.yml") -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load(root: Path, text: str, *, strict: bool = False) -> LoadedPolicy:
    write(root, text)
    return load_policy(root, strict=strict)


def test_no_policy_file_uses_the_default_preset(tmp_path: Path) -> None:
    loaded = load_policy(tmp_path)
    assert loaded.is_default
    assert loaded.source == "default preset"
    assert loaded.banner == "no .gpu-gate.yml found: using the default preset"
    assert loaded.policy == Policy()
    assert loaded.warnings == ()


def test_design_example_loads_with_its_values(tmp_path: Path) -> None:
    write(tmp_path, (DATA / "design_example.yml").read_text())
    loaded = load_policy(tmp_path)
    p = loaded.policy
    assert (loaded.source, loaded.is_default, loaded.warnings) == (".gpu-gate.yml", False, ())
    assert p.version == 1 and p.extends is None
    assert p.kernels.include == ("csrc/**/*.cu", "csrc/**/*.cuh", "mylib/**/*.py")
    assert p.kernels.exclude == ("third_party/**",)
    assert p.specs == ("gate/**/*_gate.py",)
    assert p.uncovered == "fail"
    eq = p.checks.equivalence
    assert (eq.level, eq.cases, eq.dtypes) == ("required", 200, ("float32", "bfloat16", "float16"))
    assert eq.tolerance.baseline_factor == 2.0 and eq.tolerance.atol is None
    assert (p.checks.determinism.repeats, p.checks.determinism.concurrent_load) == (8, True)
    levels = {name: p.check(name).level for name in ("memcheck", "racecheck", "synccheck", "initcheck")}
    assert levels == {"memcheck": "required", "racecheck": "required", "synccheck": "required", "initcheck": "advisory"}
    assert p.runner.labels == ("self-hosted", "linux", "gpu")
    assert p.runner.job_timeout_minutes == 30
    assert p.runner.run_timeout_minutes == 120  # not in the example: the default


def test_yaml_extension_is_found_too(tmp_path: Path) -> None:
    write(tmp_path, "uncovered: warn\n", ".gpu-gate.yaml")
    loaded = load_policy(tmp_path)
    assert (loaded.source, loaded.policy.uncovered) == (".gpu-gate.yaml", "warn")


def test_both_extensions_warn_and_yml_wins(tmp_path: Path) -> None:
    write(tmp_path, "uncovered: warn\n", ".gpu-gate.yml")
    write(tmp_path, "uncovered: ignore\n", ".gpu-gate.yaml")
    loaded = load_policy(tmp_path)
    assert loaded.policy.uncovered == "warn"
    assert loaded.warnings == (".gpu-gate.yaml: warning: ignored, because .gpu-gate.yml exists (delete one of them)",)


@pytest.mark.parametrize("text", ["", "# nothing set yet\n", "---\n"])
def test_empty_file_means_all_defaults(tmp_path: Path, text: str) -> None:
    loaded = load(tmp_path, text)
    assert loaded.policy == Policy()
    assert not loaded.is_default and loaded.source == ".gpu-gate.yml"


def test_explicit_path_outside_repo_keeps_its_own_name(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    other = write(tmp_path, "refusals: fail\n", "elsewhere/policy.yml")
    loaded = load_policy(repo, other)
    assert loaded.source == str(other)
    assert loaded.policy.refusals == "fail"


def test_explicit_path_inside_repo_is_shown_relative(tmp_path: Path) -> None:
    path = write(tmp_path, "refusals: ignore\n", "ci/gate.yml")
    assert load_policy(tmp_path, path).source == "ci/gate.yml"


@pytest.mark.parametrize(("value", "level"), [
    ("required", "required"), ("advisory", "advisory"), ("off", "off"), ("true", "required"),
    ("false", "off"), ("'off'", "off"), ("{level: off}", "off"), ("{level: advisory}", "advisory"),
])
def test_check_levels_in_every_spelling(tmp_path: Path, value: str, level: str) -> None:
    assert load(tmp_path, f"checks:\n  racecheck: {value}\n").policy.checks.racecheck.level == level


def test_mapping_without_level_keeps_each_checks_default_level(tmp_path: Path) -> None:
    p = load(tmp_path, "checks:\n  initcheck: {cases: 8}\n  memcheck: {cases: 2}\n").policy
    assert (p.checks.initcheck.level, p.checks.initcheck.cases) == ("advisory", 8)
    assert (p.checks.memcheck.level, p.checks.memcheck.cases) == ("required", 2)


def test_enabled_checks_follow_registry_order_and_skip_off(tmp_path: Path) -> None:
    p = load(tmp_path, "checks:\n  determinism: off\n  compile: advisory\n").policy
    names = [name for name, _ in p.enabled_checks()]
    assert names == ["compile", "equivalence", "memcheck", "racecheck", "synccheck", "initcheck"]
    assert p.enabled_checks()[0][1].level == "advisory"
    assert isinstance(p.check("memcheck"), SanitizerPolicy)
    with pytest.raises(KeyError, match="unknown check 'memchek'"):
        p.check("memchek")


def test_rules_carry_the_verdict_modes(tmp_path: Path) -> None:
    p = load(tmp_path, "uncovered: ignore\nnot_run: warn\nrefusals: fail\n").policy
    assert p.rules() == Rules(uncovered="ignore", not_run="warn", refusals="fail")
    assert Policy().rules() == Rules()


def test_policy_is_frozen() -> None:
    p = Policy()
    with pytest.raises(pydantic.ValidationError):
        p.uncovered = "ignore"
    with pytest.raises(pydantic.ValidationError):
        p.checks.equivalence.cases = 1


def test_check_options_are_json_data_without_level() -> None:
    options = Policy().checks.equivalence.options()
    assert "level" not in options
    assert options["tolerance"] == {"baseline_factor": 2.0, "atol": None, "rtol": None}
    assert options["max_case_bytes"] == 256 * 1024 * 1024


def test_checks_model_has_one_field_per_registered_check() -> None:
    assert list(Checks.model_fields) == list(CHECKS)


def test_gpus_accepts_all_or_a_count(tmp_path: Path) -> None:
    assert load(tmp_path, "runner: {gpus: 2}\n").policy.runner.gpus == 2
    assert load(tmp_path, "runner: {gpus: all}\n").policy.runner.gpus == "all"


def test_runner_health_thresholds(tmp_path: Path) -> None:
    health = load(tmp_path, "runner:\n  health: {max_temperature_c: 80, allow_other_processes: true,\n"
                            "           required_tools: [torch, cupy]}\n").policy.runner.health
    assert (health.max_temperature_c, health.min_free_memory_mib, health.allow_other_processes) == (80, 1024, True)
    assert health.required_tools == ("torch", "cupy")
    assert default_policy().runner.health.required_tools is None  # derived from the run's jobs


def test_atol_and_rtol_together_are_accepted(tmp_path: Path) -> None:
    tol = load(tmp_path, "checks:\n  equivalence: {tolerance: {atol: 1.0e-3, rtol: 1e-2}}\n").policy.checks.equivalence.tolerance
    assert (tol.atol, tol.rtol, tol.baseline_factor) == (1e-3, 1e-2, 2.0)


# ---- presets and extends -------------------------------------------------------------------------

def test_default_preset_equals_the_model_defaults() -> None:
    assert default_policy() == Policy()


def _leaf_paths(model: type[pydantic.BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, pydantic.BaseModel):
            out += _leaf_paths(sub, prefix + (name,))
        elif name != "extends":
            out.append(prefix + (name,))
    return out


def test_default_preset_writes_out_every_setting() -> None:
    raw = yaml.safe_load(preset_path("default").read_text())
    missing = []
    for path in _leaf_paths(Policy):
        node = raw
        for part in path:
            if not isinstance(node, dict) or part not in node:
                missing.append(".".join(path))
                break
            node = node[part]
    assert missing == []


def test_strict_preset_values() -> None:
    p = load_policy(Path.cwd(), preset_path("strict")).policy
    assert p.extends == "default"
    assert p.refusals == "fail"
    assert p.checks.equivalence.cases == 200
    assert p.checks.equivalence.dtypes == ("float32", "float16", "bfloat16")
    assert [p.check(t).level for t in ("memcheck", "racecheck", "synccheck", "initcheck")] == ["required"] * 4
    assert (p.checks.compile.max_spill_bytes, p.checks.compile.resources_level) == (0, "required")
    assert p.checks.memcheck.cases == 4  # merged in from default, not reset by the `required` shorthand


def test_extends_strict_merges_deeply_and_lists_replace(tmp_path: Path) -> None:
    text = (
        "extends: strict\n"
        "kernels: {include: [\"csrc/**/*.cu\"]}\n"
        "checks:\n"
        "  equivalence: {cases: 10}\n"
        "  initcheck: advisory\n"
    )
    p = load(tmp_path, text).policy
    assert p.extends == "strict"
    assert p.kernels.include == ("csrc/**/*.cu",)  # replaced, not appended
    assert p.kernels.exclude == ("third_party/**", ".git/**", ".github/**")  # untouched sibling kept
    assert p.checks.equivalence.cases == 10
    assert p.checks.equivalence.dtypes == ("float32", "float16", "bfloat16")  # from strict
    assert p.checks.initcheck.level == "advisory"
    assert p.refusals == "fail"


def test_extends_relative_path_chain(tmp_path: Path) -> None:
    write(tmp_path, "extends: strict\nuncovered: warn\nchecks: {equivalence: {cases: 7}}\n", "policies/base.yml")
    p = load(tmp_path, "extends: policies/base.yml\nchecks: {equivalence: {seed: 3}}\n").policy
    assert (p.uncovered, p.checks.equivalence.cases, p.checks.equivalence.seed) == ("warn", 7, 3)
    assert p.refusals == "fail"
    assert p.extends == "policies/base.yml"


# ---- validate-policy ------------------------------------------------------------------------------

def test_validate_policy_file_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "checks: {determinism: off, synccheck: advisory, initcheck: off}\n")
    code, lines = validate_policy_file(Path(".gpu-gate.yml"), strict=False)
    assert code == 0
    assert lines == [".gpu-gate.yml: valid; checks: compile (required), equivalence (required), "
                     "memcheck (required), racecheck (required), synccheck (advisory)"]


def test_validate_policy_file_warning_then_strict_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "version: 1\nrunner:\n  label: [gpu]\n")
    code, lines = validate_policy_file(Path(".gpu-gate.yml"), strict=False)
    assert code == 0
    assert lines[0] == ".gpu-gate.yml:3:3: warning: unknown key 'label' in runner is ignored (did you mean 'labels'?)"
    assert lines[1].startswith(".gpu-gate.yml: valid; checks: ")
    code, lines = validate_policy_file(Path(".gpu-gate.yml"), strict=True)
    assert (code, lines) == (2, [".gpu-gate.yml:3:3: unknown key 'label' in runner (strict mode; did you mean 'labels'?)"])


def test_validate_policy_file_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, lines = validate_policy_file(Path("nope.yml"), strict=False)
    assert (code, lines) == (2, ["nope.yml: file not found (check the path; with no policy file the default preset applies)"])
