"""docs/reference/action.md is the action's and the reusable workflow's own description of their inputs and
outputs: it is rendered from action.yml and gate.yml, and must match them. After changing either file,
rewrite it with ``python tests/commands/test_docs_reference.py``."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "action.md"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(spec: dict[str, Any]) -> str:
    value = spec.get("default", "")
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{_cell(value)}`" if str(value) != "" else "(empty)"


def _inputs(inputs: dict[str, Any]) -> list[str]:
    return ["| input | default | what it does |", "| --- | --- | --- |",
            *(f"| `{name}` | {_default(spec)} | {_cell(spec.get('description', ''))} |" for name, spec in inputs.items())]


def _outputs(outputs: dict[str, Any]) -> list[str]:
    return ["| output | what it holds |", "| --- | --- |",
            *(f"| `{name}` | {_cell(spec['description'])} |" for name, spec in outputs.items())]


def render() -> str:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    call = yaml.safe_load((ROOT / ".github" / "workflows" / "gate.yml").read_text())[True]["workflow_call"]
    lines = ["# Reference: the action and the reusable workflow", "",
             "Rendered from `action.yml` and `.github/workflows/gate.yml`, their own descriptions",
             "(`tests/commands/test_docs_reference.py` keeps the three in step). How to use them: [github.md](../github.md).",
             "", "## The action: `uses: <org>/gpu-gate@<sha>`", "", "### Inputs", "", *_inputs(action["inputs"]), "",
             "### Outputs", "", *_outputs(action["outputs"]), "",
             "## The reusable workflow: `uses: <org>/gpu-gate/.github/workflows/gate.yml@<sha>`", "", "### Inputs", "",
             *_inputs(call["inputs"]), "", "### Outputs", "", *_outputs(call["outputs"]), ""]
    return "\n".join(lines)


def test_the_reference_page_says_what_the_files_say() -> None:
    assert PAGE.read_text() == render(), "docs/reference/action.md is stale: run `python tests/commands/test_docs_reference.py`"


def test_every_input_is_on_the_page() -> None:
    text = PAGE.read_text()
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert all(f"| `{name}` |" in text for name in ("package", "package-sha256", "setup-cache", *action["inputs"]))


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}", file=sys.stderr)
