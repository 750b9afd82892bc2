"""Random policies never produce a traceback: only a valid policy, or one-line `path:line:col` errors.

Random bytes and YAML-ish text exercise the reader and the parser (control characters, tabs, stray
anchors, unclosed brackets); random documents built from the real keys exercise validation and merging.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_gate.errors import GateError
from gpu_gate.policy import load_policy, validate_policy_file

FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])
LINE = re.compile(r"^(warning: )?\.gpu-gate\.yml(:\d+:\d+)?: ")
ERROR_LINE = re.compile(r"^(\.gpu-gate\.yml|[\w./-]+\.yml|policies/\w+\.yml)(:\d+:\d+)?: ")

TOKENS = ["version: 1\n", "checks:\n", "  memcheck: off\n", "  equivalence: {cases: ", "kernels: {include: [",
          "uncovered: ", "fail", "warn", "\t", "  ", "\n", "- ", ": ", "&a ", "*a", "<<: *a\n", "[", "]", "{", "}",
          "'", '"', "\\", "#", "---\n", "...\n", "%YAML 1.1\n", "!!python/object:os.system ", "!!binary ", "? ",
          "|\n", ">-\n", "extends: ", "default", "strict", "../x.yml", "/etc/passwd", "x.yml", "~", "null", "1e309",
          "-1", "0x10", "on", "yes", "\x00", "\x07", "\x1b", "\ufeff", "\x85", "\u2028", "é", "😀", "\r", "\r\n"]
KEYS = ["version", "extends", "kernels", "include", "exclude", "specs", "uncovered", "not_run", "refusals",
        "rule_changes", "checks", "compile", "equivalence", "determinism", "memcheck", "racecheck", "synccheck",
        "initcheck", "level", "cases", "dtypes", "tolerance", "baseline_factor", "atol", "rtol", "seed", "runner",
        "labels", "gpus", "health", "cuda", "sanitizer", "cache", "enabled", "archs", "triton"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.sampled_from(["required", "advisory", "off", "fail", "warn", "ignore", "default", "all",
                                     "sm_90", "float32", "**/*.cu", "/etc/passwd", "../../x.yml"]),
                    st.text(max_size=12))
DOCS = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=5)), max_leaves=25)


def _policy_file(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir(exist_ok=True)
    (root / ".git").mkdir(exist_ok=True)
    return root / ".gpu-gate.yml"


def _loads_or_explains(path: Path) -> None:
    try:
        load_policy(path.parent)
    except GateError as err:  # anything else is a traceback: the test fails with it
        for line in str(err).splitlines():
            assert ERROR_LINE.match(line), line
    code, lines = validate_policy_file(path, strict=False)
    assert code in (0, 2)
    assert lines and all(ERROR_LINE.match(line) or line.startswith(".gpu-gate.yml") for line in lines), lines


@FUZZ
@given(raw=st.binary(max_size=200))
def test_random_bytes(tmp_path: Path, raw: bytes) -> None:
    path = _policy_file(tmp_path)
    path.write_bytes(raw)
    _loads_or_explains(path)


@FUZZ
@given(parts=st.lists(st.sampled_from(TOKENS), max_size=30))
def test_yaml_ish_text(tmp_path: Path, parts: list[str]) -> None:
    path = _policy_file(tmp_path)
    path.write_bytes("".join(parts).encode("utf-8", "surrogatepass"))
    _loads_or_explains(path)


@FUZZ
@given(doc=DOCS)
def test_random_documents(tmp_path: Path, doc: object) -> None:
    path = _policy_file(tmp_path)
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    _loads_or_explains(path)


@FUZZ
@given(doc=st.dictionaries(st.sampled_from(KEYS), DOCS, max_size=6))
def test_random_policies_with_real_top_level_keys(tmp_path: Path, doc: dict[str, object]) -> None:
    path = _policy_file(tmp_path)
    path.write_text(yaml.safe_dump({"version": 1, **doc}), encoding="utf-8")
    _loads_or_explains(path)
