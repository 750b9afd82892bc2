"""Every policy error a user can make reads `path:line:col: what is wrong (hint)`, with exact text."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpu_gate.errors import PolicyError
from gpu_gate.exitcodes import ExitCode
from gpu_gate.policy import load_policy


def write(root: Path, text: str, name: str = ".gpu-gate.yml") -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def error_of(root: Path, text: str, *, strict: bool = False) -> str:
    write(root, text)
    with pytest.raises(PolicyError) as info:
        load_policy(root, strict=strict)
    assert info.value.exit_code is ExitCode.USAGE_ERROR
    return str(info.value)


CHECK_NAMES = "compile, equivalence, determinism, memcheck, racecheck, synccheck, initcheck, speed"


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(
        "version: 1\nchecks:\n\tmemcheck: required\n",
        ".gpu-gate.yml:3:1: invalid YAML: found character '\\t' that cannot start any token"
        " (indent with spaces; YAML does not allow tabs)",
        id="tab"),
    pytest.param(
        "checks:\n  memcheck: required\n racecheck: required\n",
        ".gpu-gate.yml:3:2: invalid YAML: expected <block end>, but found '<block mapping start>',"
        " while parsing a block mapping started at line 1 (indent this line like the keys above it)",
        id="indentation"),
    pytest.param(
        "specs: [gate/*_gate.py\nuncovered: warn\n",
        ".gpu-gate.yml:2:10: invalid YAML: expected ',' or ']', but got ':', while parsing a flow sequence"
        " started at line 1 (close the brackets, and separate the items with commas)",
        id="unclosed-list"),
    pytest.param(
        "version: 1\n---\nversion: 1\n",
        ".gpu-gate.yml:2:1: invalid YAML: a second document starts here"
        " (a policy file holds one document; remove the '---' line)",
        id="two-documents"),
    pytest.param(
        "checks:\n  equivalence:\n    cases: 8\n    cases: 9\n",
        ".gpu-gate.yml:4:5: duplicate key 'cases' (it is already set on line 3; keep one)",
        id="duplicate-key"),
    pytest.param(
        "# a list is not a policy\n- memcheck\n",
        ".gpu-gate.yml:2:1: the policy must be a mapping, got a list"
        " (start the file with `version: 1` and put each setting on its own `key: value` line)",
        id="not-a-mapping"),
    pytest.param(
        "on: push\nchecks: {1: required}\n",
        ".gpu-gate.yml:1:1: key 'on' is read by YAML as a boolean, not a name (quote it, or fix the key)\n"
        ".gpu-gate.yml:2:10: key '1' is read by YAML as a number, not a name (quote it, or fix the key)",
        id="non-name-keys"),
])
def test_malformed_yaml(tmp_path: Path, text: str, message: str) -> None:
    assert error_of(tmp_path, text) == message


@pytest.mark.parametrize(("text", "message"), [
    pytest.param(
        "checks:\n  equivalence:\n    cases: many\n",
        ".gpu-gate.yml:3:12: checks.equivalence.cases: expected a whole number, got 'many' (e.g. cases: 64)",
        id="cases-many"),
    pytest.param(
        "checks:\n  memchek: required\n",
        f".gpu-gate.yml:2:3: unknown check 'memchek' (did you mean 'memcheck'? valid checks: {CHECK_NAMES})",
        id="unknown-check"),
    pytest.param(
        "checks:\n  fuzz: required\n",
        f".gpu-gate.yml:2:3: unknown check 'fuzz' (valid checks: {CHECK_NAMES})",
        id="unknown-check-no-guess"),
    pytest.param(
        "checks:\n  equivalence:\n    tolerance: {atol: 1.0e-3}\n",
        ".gpu-gate.yml:3:16: checks.equivalence.tolerance: atol is set without rtol"
        " (give atol and rtol together, or neither)",
        id="atol-without-rtol"),
    pytest.param(
        "checks:\n  equivalence:\n    tolerance:\n      rtol: 0.01\n",
        ".gpu-gate.yml:4:7: checks.equivalence.tolerance: rtol is set without atol"
        " (give atol and rtol together, or neither)",
        id="rtol-without-atol"),
    pytest.param(
        "version: 2\n",
        ".gpu-gate.yml:1:10: version: expected 1, got 2 (write version: 1)",
        id="version"),
    pytest.param(
        "uncovered: block\n",
        ".gpu-gate.yml:1:12: uncovered: expected one of 'fail', 'warn' or 'ignore', got 'block' (choose one of these)",
        id="literal"),
    pytest.param(
        "runner:\n  infrastructure: retry\n",
        ".gpu-gate.yml:2:19: runner.infrastructure: expected one of 'fail' or 'not_run', got 'retry' (choose one of these)",
        id="infrastructure"),
    pytest.param(
        "checks:\n  racecheck: requird\n",
        ".gpu-gate.yml:2:14: checks.racecheck.level: expected one of 'required', 'advisory' or 'off',"
        " got 'requird' (did you mean 'required'?)",
        id="level-typo"),
    pytest.param(
        "checks:\n  memcheck:\n",
        ".gpu-gate.yml:2:12: checks.memcheck: expected 'required', 'advisory', 'off' or a mapping of settings,"
        " got an empty value (e.g. memcheck: required)",
        id="check-empty"),
    pytest.param(
        "kernels:\n  include: csrc/*.cu\n",
        ".gpu-gate.yml:2:12: kernels.include: expected a list, got 'csrc/*.cu'"
        " (e.g. include: [\"**/*.cu\", \"**/*.cuh\", \"**/*.py\"])",
        id="list-expected"),
    pytest.param(
        "checks:\n  compile: {archs: [sm_90, sm9]}\n",
        ".gpu-gate.yml:2:28: checks.compile.archs[1]: 'sm9' is not a CUDA architecture (write e.g. sm_80 or sm_90a)",
        id="arch"),
    pytest.param(
        "runner: {gpus: 0}\n",
        ".gpu-gate.yml:1:16: runner.gpus: expected 'all' or a number of GPUs, got 0 (write gpus: all or gpus: 2)",
        id="gpus"),
    pytest.param(
        "checks:\n  determinism: {repeats: 1}\n",
        ".gpu-gate.yml:2:26: checks.determinism.repeats: must be >= 2, got 1 (e.g. repeats: 8)",
        id="bound"),
    pytest.param(
        "cache: {enabled: maybe}\n",
        ".gpu-gate.yml:1:18: cache.enabled: expected true or false, got 'maybe' (e.g. enabled: true)",
        id="bool"),
    pytest.param(
        "reports: {sarif_notes: maybe}\n",
        ".gpu-gate.yml:1:24: reports.sarif_notes: expected true or false, got 'maybe' (e.g. sarif_notes: false)",
        id="reports-bool"),
    pytest.param(
        "runner:\n  health: {required_tools: [torch, tensorflow]}\n",
        ".gpu-gate.yml:2:36: runner.health.required_tools[1]: expected one of 'compute-sanitizer', 'nvcc', 'torch',"
        " 'triton' or 'cupy', got 'tensorflow' (choose one of these)",
        id="tool"),
])
def test_wrong_values(tmp_path: Path, text: str, message: str) -> None:
    assert error_of(tmp_path, text) == message


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / ".gpu-gate.yml").write_bytes(b"version: 1\nspecs: [caf\xe9]\n")
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path)
    assert str(info.value) == ".gpu-gate.yml:2:12: not UTF-8 text (invalid continuation byte) (save the file as UTF-8)"


def test_all_errors_are_collected_one_per_line_in_file_order(tmp_path: Path) -> None:
    text = "checks:\n  memchek: required\n  equivalence: {cases: many}\nrefusals: sometimes\n"
    assert error_of(tmp_path, text).splitlines() == [
        f".gpu-gate.yml:2:3: unknown check 'memchek' (did you mean 'memcheck'? valid checks: {CHECK_NAMES})",
        ".gpu-gate.yml:3:24: checks.equivalence.cases: expected a whole number, got 'many' (e.g. cases: 64)",
        ".gpu-gate.yml:4:11: refusals: expected one of 'fail', 'warn' or 'ignore', got 'sometimes' (choose one of these)",
    ]


def test_unknown_keys_warn_and_are_ignored(tmp_path: Path) -> None:
    write(tmp_path, "uncoverd: warn\nchecks:\n  equivalence:\n    casez: 3\n  racecheck: {level: off}\n")
    loaded = load_policy(tmp_path)
    assert loaded.warnings == (
        ".gpu-gate.yml:1:1: warning: unknown key 'uncoverd' is ignored (did you mean 'uncovered'?)",
        ".gpu-gate.yml:4:5: warning: unknown key 'casez' in checks.equivalence is ignored (did you mean 'cases'?)",
    )
    assert loaded.policy.uncovered == "fail"  # the misspelt key changed nothing
    assert loaded.policy.checks.equivalence.cases == 64
    assert loaded.policy.checks.racecheck.level == "off"


def test_unknown_key_without_a_close_match_lists_the_valid_keys(tmp_path: Path) -> None:
    write(tmp_path, "cache: {ttl: 3}\n")
    assert load_policy(tmp_path).warnings == (
        ".gpu-gate.yml:1:9: warning: unknown key 'ttl' in cache is ignored (valid keys here: enabled, dir)",)


def test_a_misspelt_reports_key_is_caught_like_any_other(tmp_path: Path) -> None:
    write(tmp_path, "reports:\n  sarif_note: true\n")
    assert load_policy(tmp_path).warnings == (
        ".gpu-gate.yml:2:3: warning: unknown key 'sarif_note' in reports is ignored (did you mean 'sarif_notes'?)",)
    assert load_policy(tmp_path).policy.reports.sarif_notes is False
    write(tmp_path, "reports: {sarif_notes: true}\n")
    assert load_policy(tmp_path).policy.reports.sarif_notes is True


def test_strict_mode_turns_unknown_keys_into_errors(tmp_path: Path) -> None:
    text = "uncoverd: warn\nchecks:\n  equivalence:\n    casez: 3\n"
    assert error_of(tmp_path, text, strict=True).splitlines() == [
        ".gpu-gate.yml:1:1: unknown key 'uncoverd' (strict mode; did you mean 'uncovered'?)",
        ".gpu-gate.yml:4:5: unknown key 'casez' in checks.equivalence (strict mode; did you mean 'cases'?)",
    ]


def test_extends_unknown_preset(tmp_path: Path) -> None:
    assert error_of(tmp_path, "extends: defualt\n") == (
        ".gpu-gate.yml:1:10: extends: unknown preset 'defualt'"
        " (did you mean 'default'? presets: default, strict; or give a relative path such as base.yml)")


def test_extends_not_a_string(tmp_path: Path) -> None:
    assert error_of(tmp_path, "extends: [default]\n") == (
        ".gpu-gate.yml:1:10: extends: expected a preset name or a relative path, got ['default']"
        " (write e.g. extends: default; presets: default, strict)")


def test_extends_missing_file(tmp_path: Path) -> None:
    assert error_of(tmp_path, "version: 1\nextends: ci/base.yml\n") == (
        ".gpu-gate.yml:2:10: extends: file 'ci/base.yml' not found"
        " (looked for ci/base.yml; paths are relative to the file that extends them)")


def test_extends_cycle(tmp_path: Path) -> None:
    write(tmp_path, "version: 1\nextends: ../.gpu-gate.yml\n", "ci/base.yml")
    assert error_of(tmp_path, "extends: ci/base.yml\n") == (
        "ci/base.yml:2:10: extends cycle: .gpu-gate.yml -> ci/base.yml -> .gpu-gate.yml (remove one of these extends)")


def test_extends_self(tmp_path: Path) -> None:
    assert error_of(tmp_path, "extends: .gpu-gate.yml\n") == (
        ".gpu-gate.yml:1:10: extends cycle: .gpu-gate.yml -> .gpu-gate.yml (remove one of these extends)")


def test_errors_in_an_extended_file_point_into_that_file(tmp_path: Path) -> None:
    write(tmp_path, "checks:\n  determinism:\n    repeats: lots\n", "ci/base.yml")
    assert error_of(tmp_path, "extends: ci/base.yml\nuncovered: warn\n") == (
        "ci/base.yml:3:14: checks.determinism.repeats: expected a whole number, got 'lots' (e.g. repeats: 8)")


def test_overridden_value_is_reported_where_the_override_is(tmp_path: Path) -> None:
    write(tmp_path, "checks:\n  equivalence: {cases: 10}\n", "ci/base.yml")
    assert error_of(tmp_path, "extends: ci/base.yml\nchecks:\n  equivalence:\n    cases: -4\n") == (
        ".gpu-gate.yml:4:12: checks.equivalence.cases: must be >= 1, got -4 (e.g. cases: 64)")


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path, tmp_path / "ci" / "gate.yml")
    assert str(info.value) == "ci/gate.yml: file not found (check the path; with no policy file the default preset applies)"


def test_unknown_key_shared_by_a_yaml_alias_warns_for_each_use(tmp_path: Path) -> None:
    write(tmp_path, "checks:\n  memcheck: &m {cases: 3, casez: 1}\n  racecheck: *m\n")
    loaded = load_policy(tmp_path)
    assert loaded.warnings == (
        ".gpu-gate.yml:2:27: warning: unknown key 'casez' in checks.memcheck is ignored (did you mean 'cases'?)",
        ".gpu-gate.yml:2:27: warning: unknown key 'casez' in checks.racecheck is ignored (did you mean 'cases'?)",
    )
    assert (loaded.policy.checks.memcheck.cases, loaded.policy.checks.racecheck.cases) == (3, 3)


def test_a_control_character_in_an_extends_path_stays_on_one_line(tmp_path: Path) -> None:
    """Found by the policy fuzzer: `extends: "\\r/"` put a carriage return into the hint, and the
    one-line error became two lines."""
    from gpu_gate.errors import GateError
    from gpu_gate.policy import load_policy

    (tmp_path / ".git").mkdir()
    (tmp_path / ".gpu-gate.yml").write_text('extends: "\\r/"\n')
    with pytest.raises(GateError) as err:
        load_policy(tmp_path)
    assert len(str(err.value).splitlines()) == 1
    assert "looked for '\\r'" in str(err.value)
