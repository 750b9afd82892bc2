"""The KernelBench format: a problem module defines ``Model``, ``get_inputs()`` and ``get_init_inputs()``;
a submission module defines ``ModelNew``. This module turns a problem into a gate spec and a small
repository that gates one submission as a pull request against the problem's own ``Model``.

The spec (written here, from the trusted problem; the submission never touches it):
- dims from the shapes ``get_inputs()`` returns, as the probe found them (``probe.py``): each size may
  change from the smallest the model accepts to twice the problem's, axes the model ties together share
  a dim, and an axis tied to a constructor-sized weight keeps its size; a dim the output's shape ignores
  is a reduction (its error growth is measured);
- float inputs in the problem's dtype (``dtypes`` adds more), integer inputs as indices below the axis the
  model checks them against (the number of classes, the vocabulary), else below the bound seen;
  constants passed as they are;
- both models built from ``get_init_inputs()`` under one seed, then the reference's float parameters
  drawn away from their initial values (a norm weight of ones hides a kernel that ignores it) and loaded
  into the submission's model wherever a parameter has the same name and shape;
- the backward too, where a gradient reaches the inputs: their gradients, and each float parameter's gradient
  for an upstream gradient drawn from the output's size (a submission's outputs named `param_grad:NAME`).
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
PROBLEM_MODULE = "problem"
SUBMISSION_MODULE = "submission"
BASE_SUBMISSION = f"from {PROBLEM_MODULE} import Model as ModelNew  # the base: the problem's own model\n"


def is_problem(path: Path) -> bool:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    return "class Model" in text and "def get_inputs" in text and "def get_init_inputs" in text


def probe(problem: Path, timeout_s: float = 600) -> dict[str, Any]:
    """Run the probe on ``problem`` in a process of its own; a problem that fails is a GateError naming it."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = proc.run([sys.executable, "-m", "gpu_gate.audit.probe", str(problem.resolve())], env=env, timeout=timeout_s,
                 cwd=problem.parent)
    if not r.ok:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise GateError(f"{problem}: the problem could not be probed: {last}",
                        hint="run it with python: Model(*get_init_inputs())(*get_inputs()) must work on the CPU")
    found: dict[str, Any] = json.loads(r.stdout)
    if found["unsupported"]:
        raise GateError(f"{problem}: not supported by audit yet: " + "; ".join(found["unsupported"]),
                        hint="float and integer tensors and plain constants are supported as inputs")
    return found


def _dim_names(found: dict[str, Any]) -> dict[tuple[int, int], str]:
    names = found["names"]
    out: dict[tuple[int, int], str] = {}
    for dim in found["dims"]:
        i, a = dim["axes"][0]
        name = f"{names[i]}_{a}"
        for ax in dim["axes"]:
            out[(ax[0], ax[1])] = name
    return out


def defines_backward(source: str) -> bool:
    """Whether a submission gives its kernels a backward (an autograd Function): KernelBench asks for the
    forward only, so a submission without one is checked forward only, and the audit's table says so."""
    return bool(re.search(r"autograd\.Function|def\s+backward\s*\(", source))


def spec_text(found: dict[str, Any], stem: str, *, dtypes: Sequence[str] = (), seed: int = 0,
              backward: bool = True) -> str:
    """The gate spec's source for a probed problem; ``backward``: check the gradients where the problem's
    outputs are differentiable."""
    names: list[str] = found["names"]
    dim_of = _dim_names(found)
    dims: list[str] = []
    for dim in found["dims"]:
        i, a = dim["axes"][0]
        size = dim["size"]
        red = ", reduction=True" if dim["reduced"] else ""
        dims.append(f"{dim_of[(i, a)]!r}: gg.Dim({dim['lo']}, {max(2 * size, dim['lo'])}{red}),  # {size} in the problem")
    inputs: list[str] = []
    params: list[str] = []
    floats: list[str] = []
    for i, (name, d) in enumerate(zip(names, found["inputs"])):
        if d["kind"] == "const":
            params.append(f"{name!r}: {d['value']!r}")
            continue
        shape = tuple(dim_of.get((i, a), size) for a, size in enumerate(d["shape"]))
        if d["kind"] == "float":
            menu = [d["dtype"], *(t for t in dtypes if t != d["dtype"])]
            like = f"dtype=\"like:{floats[0]}\"" if floats else f"dtypes={menu!r}"
            inputs.append(f"{name!r}: gg.Tensor({shape!r}, {like}),")
            floats.append(name)
        else:
            high: object = d["high"]
            if d.get("bound"):  # the axis the model checks it against: below that dim, whatever its size
                j, a = d["bound"]
                high = dim_of.get((j, a), found["inputs"][j]["shape"][a])
            else:
                for (j, a), dim_name in dim_of.items():
                    if found["inputs"][j].get("shape", [None] * (a + 1))[a] == high:
                        high = dim_name
                        break
            inputs.append(f"{name!r}: gg.Index({shape!r}, high={high!r}, dtype={d['dtype']!r}),")
    tied = {k: tuple(dim["axes"][0]) for dim in found["dims"] for k in dim.get("init", [])}
    grads = floats if backward and found.get("differentiable") else []
    args = ", ".join(names)
    nl = "\n        "
    return f'''"""Gate spec written by gpu-gate audit from the KernelBench problem {stem!r}: the problem's Model is
the reference, the submission's ModelNew the candidate, both built under one seed with the same
parameters."""
import torch

import gpu_gate as gg
import {PROBLEM_MODULE}
import {SUBMISSION_MODULE}

_INIT = {found["init"]!r}
_PARAM_GRADS = {bool(grads)!r}  # the parameters' gradients are outputs too (a submission with a backward)
_TIED = {tied!r}  # constructor argument -> (input, axis) whose size it is
_SEED = {seed}
_STATES = {{}}
_MODELS = {{}}


def _init(args):
    init = list(_INIT)
    for k, (i, a) in _TIED.items():
        init[k] = args[i].shape[a]
    return tuple(init)


def _reference_state(init):
    if init not in _STATES:
        torch.manual_seed(_SEED)
        model = {PROBLEM_MODULE}.Model(*init)
        g = torch.Generator().manual_seed(_SEED + 1)
        with torch.no_grad():
            for p in model.parameters():
                if p.dtype.is_floating_point and p.numel():
                    spread = float(p.float().std()) if p.numel() > 1 else 0.0
                    p.add_((spread if spread > 0 else 1.0) * 0.5 * torch.randn(p.shape, generator=g).to(p.dtype))
        _STATES[init] = {{k: v.detach().clone() for k, v in model.state_dict().items()}}
    return _STATES[init]


def _call(cls, args):
    """``cls`` built as the problem builds it, with the reference's parameters, on the inputs' device and in
    their float dtype (float64 for the truth), called on ``args``."""
    like = next((a for a in args if isinstance(a, torch.Tensor) and a.dtype.is_floating_point), args[0])
    dtype = like.dtype if like.dtype.is_floating_point else None
    init = _init(args)
    key = (cls, like.device, dtype, init)
    if key not in _MODELS:
        torch.manual_seed(_SEED)
        with torch.device(like.device):
            model = cls(*init)
        own = model.state_dict()
        model.load_state_dict({{k: v for k, v in _reference_state(init).items()
                               if k in own and tuple(own[k].shape) == tuple(v.shape)}}, strict=False)
        model = model.to(like.device)
        _MODELS[key] = model.to(dtype) if dtype is not None else model
    if not _PARAM_GRADS:
        return _MODELS[key](*args)
    with torch.enable_grad():
        return _with_parameter_grads(_MODELS[key], _MODELS[key](*args))


def _with_parameter_grads(model, out):
    """The forward's outputs, and the gradient of each float parameter for an upstream gradient drawn
    from each output's size alone (the same for the submission and the reference): a backward is checked
    for the parameters it trains, not only for the inputs (whose gradients the gate checks itself)."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    named = {{f"out{{i}}": o for i, o in enumerate(outs)}} if isinstance(out, (tuple, list)) else {{"out": out}}
    params = [(n, p) for n, p in model.named_parameters() if p.dtype.is_floating_point]
    live = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    ups = [torch.randn(tuple(o.shape), generator=torch.Generator().manual_seed(1 + o.numel()))
           .to(device=o.device, dtype=o.dtype) for o in live]
    found = (torch.autograd.grad(live, [p for _, p in params], ups, retain_graph=True, allow_unused=True)
             if live and params else [None] * len(params))
    for (n, p), g in zip(params, found):
        named[f"param_grad:{{n}}"] = (torch.zeros_like(p) if g is None else g).detach()
    return named


def _reference({args}):
    return _call({PROBLEM_MODULE}.Model, ({args},))


@gg.spec(
    dims={{{nl}{nl.join(dims)}
    }},
    inputs={{{nl}{nl.join(inputs)}
    }},
    params={{{", ".join(params)}}},
    reference=_reference,
    grads={grads!r},
    name={stem!r},
)
def {stem}_gate({args}):
    return _call({SUBMISSION_MODULE}.ModelNew, ({args},))
'''
