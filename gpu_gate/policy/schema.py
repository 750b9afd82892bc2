"""The JSON Schema of `.gpu-gate.yml`, generated from the models.

`python -m gpu_gate.policy.schema` rewrites `policies/schema.json`; a test fails when it is stale.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .extends import PRESETS_DIR
from .models import Policy

SCHEMA_PATH = PRESETS_DIR / "schema.json"


def generate() -> dict[str, Any]:
    schema = Policy.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render() -> str:
    return json.dumps(generate(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else SCHEMA_PATH
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
