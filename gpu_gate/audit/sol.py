"""The SOL-ExecBench format (the FlashInfer trace schema): a *definition* (JSON: ``axes`` const or var,
typed ``inputs`` and ``outputs`` over those axes, and a ``reference`` source with a ``run()``), its
*workloads* (JSONL: the var axes' values and each input's source), and *solutions* (JSON: ``definition``,
``spec`` with ``language`` and ``entry_point`` ``file.py::function``, ``sources`` as path and content).

The spec written here, from the trusted definition:
- var axes become dims from 1 to twice the largest value a workload gives them (at least 16), so sizes
  the workloads never name (odd, tiny) are drawn; const axes keep their value: a definition is a kernel
  specialised to them;
- float inputs in the definition's dtype, drawn from every distribution the gate has (a norm weight is
  not ones, a scale not one), and positive where the name says the value is (variances, scales, ``std``);
- scalar inputs (``shape: null``) passed as the first workload gives them;
- an axis the reference reduces over (the probe perturbs its last index and watches the outputs) is a
  reduction, so its error growth is measured;
- the candidate calls the solution's entry point positionally, in the definition's order; in destination
  passing style (the format's default) gpu-gate allocates the outputs from the definition and passes
  them after the inputs, then reads them back.
Python and Triton solutions are supported; CUDA and C++ ones (built through TVM-FFI) are not yet, and
say so in their row.
"""
from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import GateError

SPEC_DIR = "gate"
REFERENCE_MODULE = "gg_reference"
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
# Inputs whose name says the value is positive: a negative draw would be an input the op never sees.
_POSITIVE = re.compile(r"(^|_)(var|variance|std|scale|scales|sigma|temperature|temp)(_|$)", re.I)


def load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def is_definition(data: dict[str, Any] | None) -> bool:
    return data is not None and all(k in data for k in ("name", "axes", "inputs", "outputs", "reference"))


def is_solution(data: dict[str, Any] | None) -> bool:
    return data is not None and all(k in data for k in ("definition", "spec", "sources"))


def definitions(where: Path) -> dict[str, Path]:
    """Every definition under ``where`` (or the file itself), by name."""
    files = [where] if where.is_file() else sorted(where.rglob("*.json"))
    found: dict[str, Path] = {}
    for f in files:
        data = load_json(f)
        if is_definition(data):
            assert data is not None
            found[str(data["name"])] = f
    return found


def workloads(definition: Path, name: str, root: Path) -> list[dict[str, Any]]:
    """The workloads of ``name``: ``workload.jsonl`` beside the definition, or ``<name>.jsonl`` under
    ``root``; a line is a workload or a trace holding one."""
    candidates = [definition.parent / "workload.jsonl", definition.with_suffix(".jsonl"),
                  *sorted(root.rglob(f"{name}.jsonl"))]
    out: list[dict[str, Any]] = []
    for path in candidates:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("workload"), dict):
                if row.get("definition") not in (None, name):
                    continue
                row = row["workload"]
            if isinstance(row, dict) and isinstance(row.get("axes"), dict):
                out.append(row)
        if out:
            break
    return out


def unsupported(defn: dict[str, Any]) -> list[str]:
    why = []
    for name, t in {**defn["inputs"], **defn["outputs"]}.items():
        dtype = t.get("dtype")
        if t.get("shape") is None:
            continue
        if dtype not in FLOAT_DTYPES:
            why.append(f"{name}: a {dtype} tensor (float32, float16 and bfloat16 tensors are supported)")
    if not re.search(r"^def run\(", defn["reference"], re.M):
        why.append("the reference defines no run()")
    return why


def probe_reductions(definition: Path, sizes: dict[str, int], scalar_values: dict[str, object],
                     timeout_s: float = 600) -> dict[str, bool]:
    """Which axes the reference reduces over, from a run of it in a process of its own."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = proc.run([sys.executable, "-m", "gpu_gate.audit.probe", "--definition", str(definition.resolve()),
                  json.dumps({"sizes": sizes, "scalars": scalar_values})], env=env, timeout=timeout_s, cwd=definition.parent)
    if not r.ok:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise GateError(f"{definition}: the reference could not be run: {last}",
                        hint="its run() must work on the CPU on random inputs of the workloads' sizes")
    found: dict[str, bool] = json.loads(r.stdout)
    return found


def probe_sizes(defn: dict[str, Any], loads: Sequence[dict[str, Any]]) -> dict[str, int]:
    """The axes' values for the probe: consts, and the smallest value the workloads give each var axis."""
    sizes: dict[str, int] = {}
    for axis, a in defn["axes"].items():
        if a.get("type") == "const":
            sizes[axis] = int(a["value"])
        else:
            seen = [int(w["axes"][axis]) for w in loads if axis in w.get("axes", {})]
            sizes[axis] = min(seen) if seen else 8
    return sizes


def scalars(defn: dict[str, Any], loads: Sequence[dict[str, Any]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, t in defn["inputs"].items():
        if t.get("shape") is not None:
            continue
        value = next((w["inputs"][name].get("value") for w in loads
                      if isinstance(w.get("inputs", {}).get(name), dict) and "value" in w["inputs"][name]), None)
        if value is None:
            raise GateError(f"definition {defn['name']}: scalar input {name!r} has no value in any workload",
                            hint="give it a {\"type\": \"scalar\", \"value\": ...} input in workload.jsonl")
        out[name] = value
    return out


def entry(solution: dict[str, Any]) -> tuple[str, str]:
    """The solution's entry module (dotted, from its file path) and function."""
    spec = solution.get("spec") or {}
    point = str(spec.get("entry_point", "main.py::run"))
    path, _, func = point.partition("::")
    if not path.endswith(".py") or not func.isidentifier():
        raise GateError(f"solution {solution.get('name')}: entry point {point!r} is not FILE.py::function",
                        hint="Python and Triton solutions name a Python file and a function")
    return path[:-3].replace("/", "."), func


def solution_problem(solution: dict[str, Any]) -> str | None:
    lang = str((solution.get("spec") or {}).get("language", "python")).lower()
    if lang not in ("python", "triton"):
        return f"a {lang} solution: only Python and Triton solutions are audited yet"
    for s in solution.get("sources", []):
        p = str(s.get("path", ""))
        if p.startswith("/") or ".." in Path(p).parts or not p:
            return f"source path {p!r} leaves the solution's directory"
    return None


def solution_files(solution: dict[str, Any]) -> dict[str, str]:
    return {str(s["path"]): str(s["content"]) for s in solution["sources"]}


def base_files(defn: dict[str, Any], solution: dict[str, Any]) -> dict[str, str]:
    """The base commit: the reference, and at the solution's entry point the reference itself in the
    solution's calling convention (so the base is torch's own result on the same cases)."""
    module, func = entry(solution)
    dps = bool((solution.get("spec") or {}).get("destination_passing_style", True))
    n_in = len(defn["inputs"])
    body = (f"from {REFERENCE_MODULE} import run as _run\n\n\ndef {func}(*args):\n"
            + (f"    outs = _run(*args[:{n_in}])\n    outs = outs if isinstance(outs, tuple) else (outs,)\n"
               f"    for dst, src in zip(args[{n_in}:], outs):\n        dst.copy_(src)\n" if dps else
               "    return _run(*args)\n"))
    files = {f"{REFERENCE_MODULE}.py": defn["reference"], module.replace(".", "/") + ".py": body}
    parts = module.split(".")[:-1]
    for i in range(len(parts)):
        files.setdefault("/".join(parts[:i + 1]) + "/__init__.py", "")
    return files


def spec_text(defn: dict[str, Any], loads: Sequence[dict[str, Any]], reduced: dict[str, bool],
              solution: dict[str, Any]) -> str:
    name = re.sub(r"\W", "_", str(defn["name"]))
    module, func = entry(solution)
    dps = bool((solution.get("spec") or {}).get("destination_passing_style", True))
    dims: list[str] = []
    for axis, a in defn["axes"].items():
        if a.get("type") == "const":
            continue
        seen = [int(w["axes"][axis]) for w in loads if axis in w.get("axes", {})]
        top = max(seen) if seen else 8
        red = ", reduction=True" if reduced.get(axis) else ""
        dims.append(f"{axis!r}: gg.Dim(1, {max(2 * top, 16)}{red}),  # workloads: "
                    + (f"{min(seen)}..{top}" if seen else "none"))
    const = {axis: int(a["value"]) for axis, a in defn["axes"].items() if a.get("type") == "const"}
    inputs: list[str] = []
    for iname, t in defn["inputs"].items():
        if t.get("shape") is None:
            continue
        shape = tuple(const.get(ax, ax) for ax in t["shape"])
        dists = ", dists=['uniform_pos']" if _POSITIVE.search(iname) else ""
        inputs.append(f"{iname!r}: gg.Tensor({shape!r}, dtypes=[{t['dtype']!r}]{dists}),")
    params = scalars(defn, loads)
    names = list(defn["inputs"])
    axes_at: dict[str, tuple[str, int]] = {}
    for iname in names:
        for d, ax in enumerate(defn["inputs"][iname].get("shape") or ()):
            axes_at.setdefault(ax, (iname, d))
    outputs = [(o, list(t.get("shape") or []), t["dtype"]) for o, t in defn["outputs"].items()]
    args = ", ".join(names)
    first = next((n for n in names if defn["inputs"][n].get("shape") is not None), names[0])
    nl = "\n        "
    return f'''"""Gate spec written by gpu-gate audit from the definition {defn["name"]!r}: its reference's run() is the
reference, the solution's entry point {module}::{func} the candidate."""
import torch

import gpu_gate as gg
import {REFERENCE_MODULE}
import {module} as _solution  # imported with the spec: its kernels are watched from the first call

_CONST = {const!r}
_AXES_AT = {axes_at!r}  # axis -> (input, dimension) that gives its size
_OUTPUTS = {outputs!r}  # (name, axes, dtype): allocated by gpu-gate in destination passing style
_DPS = {dps!r}


def _reference({args}):
    return {REFERENCE_MODULE}.run({args})


@gg.spec(
    dims={{{nl}{nl.join(dims)}
    }},
    inputs={{{nl}{nl.join(inputs)}
    }},
    params={params!r},
    reference=_reference,
    name={name!r},
)
def {name}_gate({args}):
    run = getattr(_solution, {func!r})
    if not _DPS:
        return run({args})
    given = {{{", ".join(f"{n!r}: {n}" for n in names)}}}
    size = {{**_CONST, **{{ax: given[i].shape[d] for ax, (i, d) in _AXES_AT.items()}}}}
    outs = [torch.empty([size[a] for a in axes], dtype=getattr(torch, dtype), device={first}.device)
            for _, axes, dtype in _OUTPUTS]
    run({args}, *outs)
    return outs[0] if len(outs) == 1 else tuple(outs)
'''
