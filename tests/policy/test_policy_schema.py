"""The JSON Schema of `.gpu-gate.yml` stays in sync with the models, and the presets satisfy it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from gpu_gate.policy import PRESETS, preset_path
from gpu_gate.policy.schema import SCHEMA_PATH, render

DATA = Path(__file__).parent.parent / "data" / "policy"


def test_committed_schema_matches_the_models() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render(), (
        "policies/schema.json is stale: run `python -m gpu_gate.policy.schema`")


def test_schema_module_rewrites_the_file(tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    proc = subprocess.run([sys.executable, "-m", "gpu_gate.policy.schema", str(target)],
                          capture_output=True, text=True, check=True)
    assert proc.stdout == f"wrote {target}\n"
    assert target.read_text(encoding="utf-8") == SCHEMA_PATH.read_text(encoding="utf-8")


def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.mark.parametrize("name", PRESETS)
def test_presets_validate_against_the_schema(name: str) -> None:
    _validator().validate(yaml.safe_load(preset_path(name).read_text(encoding="utf-8")))


def test_design_example_validates_against_the_schema() -> None:
    _validator().validate(yaml.safe_load((DATA / "design_example.yml").read_text(encoding="utf-8")))


@pytest.mark.parametrize("doc", [
    {"checks": {"memchek": "required"}},
    {"checks": {"equivalence": {"cases": "many"}}},
    {"uncovered": "block"},
    {"version": 2},
])
def test_schema_rejects_what_the_loader_rejects(doc: dict[str, object]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(doc)


def test_policy_layer_does_not_import_torch(tmp_path: Path) -> None:
    (tmp_path / ".gpu-gate.yml").write_text("extends: strict\n")
    code = (
        "import sys; from pathlib import Path; from gpu_gate.policy import load_policy, validate_policy_file\n"
        f"load_policy(Path({str(tmp_path)!r})); validate_policy_file(Path({str(tmp_path / '.gpu-gate.yml')!r}), strict=True)\n"
        "heavy = sorted(m for m in ('torch', 'triton', 'cupy') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout == "[]\n"
