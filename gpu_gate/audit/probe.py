"""Learn a KernelBench problem's shape from the problem itself: ``python -m gpu_gate.audit.probe FILE``
prints one JSON object (and ``--definition FILE SIZES`` which axes a SOL-ExecBench reference reduces over). The problem set is trusted (the base's role), so this runs its ``Model``
outside the sandbox, in a process of its own, on the CPU.

What it finds:
- the inputs ``get_inputs()`` returns, named by ``Model.forward``'s parameters: float tensors, integer
  tensors (index inputs: their values' upper bound) and plain constants;
- the constructor's arguments ``get_init_inputs()`` returns;
- for an index input, the axis whose size bounds its values (a label below the number of classes, a
  token id below the vocabulary): its values may reach that size less one, and the model rejects the size
  itself; the spec then draws indices below that dim, and couples them to the tensor they index;
- which axes may change size, and which must change together: every axis of the same size starts in
  one group; an axis that the model accepts changed on its own is a dim of its own; axes that the model
  accepts only changed together (a matmul's inner size in both operands) share a dim; an axis the model
  rejects in every way keeps its size (it is tied to a weight the constructor sized);
- the smallest size each dim accepts, and whether the output's shape ignores it (a reduced dim).
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Axis = tuple[int, int]  # (input index, axis)
_SMALL = (1, 2, 3, 4, 5, 8, 16, 32, 64)


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"_gg_problem_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, name):
            raise SystemExit(f"{path}: no {name} (a KernelBench problem defines Model, get_inputs and get_init_inputs)")
    return module


def _names(model_cls: Any, n: int) -> list[str]:
    params = [p for p in inspect.signature(model_cls.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]
    names = [p.name for p in params[:n]]
    names += [f"arg{i}" for i in range(len(names), n)]
    return names


def _describe(value: Any) -> dict[str, Any]:
    import torch

    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point:
            return {"kind": "float", "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
        if value.dtype in (torch.int32, torch.int64):
            high = int(value.max().item()) + 1 if value.numel() else 1
            return {"kind": "index", "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                    "high": high}
        return {"kind": "unsupported", "why": f"a {value.dtype} tensor"}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return {"kind": "const", "value": value}
    return {"kind": "unsupported", "why": f"a {type(value).__name__}"}


def _make(described: Sequence[dict[str, Any]], shapes: Sequence[Sequence[int]]) -> list[Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    out: list[Any] = []
    for d, shape in zip(described, shapes):
        if d["kind"] == "float":
            out.append(torch.randn(*shape, generator=g, dtype=torch.float32))
        elif d["kind"] == "index":
            high = shapes[d["bound"][0]][d["bound"][1]] if d.get("bound") else d["high"]
            out.append(torch.randint(0, max(1, high), tuple(shape), generator=g, dtype=getattr(torch, d["dtype"])))
        else:
            out.append(d.get("value"))
    return out


def _first(out: Any) -> list[float]:
    import torch

    outs = out if isinstance(out, (tuple, list)) else [out]
    return [float(o.reshape(-1)[0]) for o in outs if isinstance(o, torch.Tensor) and o.numel()]


def _mixes(model: Any, described: Sequence[dict[str, Any]], shapes: Sequence[Sequence[int]],
           group: Sequence[Axis]) -> bool:
    """Whether the dim is reduced over: changing the inputs' whole slice at its last index changes the
    outputs' first element, as a sum, a softmax's denominator or a matmul's inner size do (the whole slice:
    a row gathered by an index input reads it wherever the index points)."""
    import torch

    args = _make(described, shapes)
    bumped = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    touched = False
    for i, a in group:
        t = bumped[i]
        if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point or t.shape[a] < 2:
            continue
        piece = t.select(a, t.shape[a] - 1)  # not a constant: a softmax ignores a constant added to a row
        piece.add_(3.0 * torch.randn(piece.shape, generator=torch.Generator().manual_seed(1)))
        touched = True
    if not touched:
        return False
    try:
        with torch.no_grad():
            return _first(model(*args)) != _first(model(*bumped))
    except Exception:
        return False


def _bound_axis(model: Any, described: Sequence[dict[str, Any]], shapes: Sequence[Sequence[int]],
                index: int) -> list[int] | None:
    """The float input's axis that bounds index input ``index``: filled with that axis's size less one the
    model runs, filled with the size itself it fails (an index out of range). None: no axis bounds it."""
    import torch

    found = None
    for i, (d, shape) in enumerate(zip(described, shapes)):
        if d["kind"] != "float":
            continue
        for a, size in enumerate(shape):
            if size < described[index]["high"]:
                continue
            args = _make(described, shapes)
            results = []
            for value in (size - 1, size):
                args[index] = torch.full_like(args[index], value)
                try:
                    with torch.no_grad():
                        model(*args)
                    results.append(True)
                except Exception:
                    results.append(False)
            if results == [True, False]:
                if found is not None and shapes[found[0]][found[1]] != size:
                    return None  # two axes of different sizes bound it: which one is not clear
                found = found or [i, a]
    return found


def _differentiable(model: Any, described: Sequence[dict[str, Any]], shapes: Sequence[Sequence[int]]) -> bool:
    """Whether a gradient flows from the outputs to the float inputs (a backward worth checking)."""
    import torch

    args = _make(described, shapes)
    floats = [a for a, d in zip(args, described) if d["kind"] == "float"]
    for a in floats:
        a.requires_grad_(True)
    try:
        out = model(*args)
    except Exception:
        return False
    outs = out if isinstance(out, (tuple, list)) else [out]
    return bool(floats) and any(isinstance(o, torch.Tensor) and o.grad_fn is not None for o in outs)


def probe(path: Path) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():  # problems often move their inputs with .cuda(): here they stay
        torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    module = _load(path)
    torch.manual_seed(0)
    init = list(module.get_init_inputs())
    inputs = list(module.get_inputs())
    described = [_describe(v) for v in inputs]
    bad = [f"input {i}: {d['why']}" for i, d in enumerate(described) if d["kind"] == "unsupported"]
    init_bad = [f"constructor argument {i}: {d['why']}" for i, d in enumerate(map(_describe, init))
                if d["kind"] not in ("const",)]
    result: dict[str, Any] = {"inputs": described, "names": _names(module.Model, len(inputs)),
                              "init": init, "unsupported": bad + init_bad, "dims": []}
    if result["unsupported"]:
        return result
    torch.manual_seed(0)
    model = module.Model(*init).float().eval()
    shapes = [list(d.get("shape", [])) for d in described]

    def runs(changed: dict[Axis, int], init_changed: dict[int, int] | None = None) -> tuple[int, ...] | None:
        trial = [list(s) for s in shapes]
        for (i, a), size in changed.items():
            trial[i][a] = size
        try:
            built = model
            if init_changed:
                torch.manual_seed(0)
                built = module.Model(*[init_changed.get(k, v) for k, v in enumerate(init)]).float().eval()
            with torch.no_grad():
                out = built(*_make(described, trial))
        except Exception:
            return None
        first = out[0] if isinstance(out, (tuple, list)) else out
        return tuple(first.shape) if isinstance(first, torch.Tensor) else ()

    base_shape = runs({})
    if base_shape is None:
        raise SystemExit(f"{path}: Model fails on get_inputs() itself")
    for i, d in enumerate(described):  # before sizes change: an index stays below the axis that bounds it
        if d["kind"] == "index":
            d["bound"] = _bound_axis(model, described, shapes, i)
    axes = [(i, a) for i, s in enumerate(shapes) for a in range(len(s))]
    by_size: dict[int, list[Axis]] = {}
    for ax in axes:
        by_size.setdefault(shapes[ax[0]][ax[1]], []).append(ax)
    groups: list[list[Axis]] = []
    fixed: list[Axis] = []
    for size, members in by_size.items():
        other = size + 1
        alone = [m for m in members if runs({m: other}) is not None]
        groups += [[m] for m in alone]
        rest = [m for m in members if m not in alone]
        parent = {m: m for m in rest}

        def find(m: Axis) -> Axis:
            while parent[m] != m:
                m = parent[m]
            return m

        for x, m in enumerate(rest):
            for n in rest[x + 1:]:
                if find(m) != find(n) and runs({m: other, n: other}) is not None:
                    parent[find(n)] = find(m)
        comps: dict[Axis, list[Axis]] = {}
        for m in rest:
            comps.setdefault(find(m), []).append(m)
        lone = [c for c in comps.values() if len(c) == 1]
        groups += [c for c in comps.values() if len(c) > 1]
        if len(lone) > 1 and runs({m[0]: other for m in lone}) is not None:
            groups.append([m[0] for m in lone])
        else:
            fixed += [m[0] for m in lone]
    # An axis the constructor sized (a norm's hidden size, a layer's features) changes with the constructor's
    # argument of the same value: the model is built anew for each size.
    tied: list[tuple[list[Axis], list[int]]] = [(g, []) for g in sorted(groups)]
    still: list[Axis] = []
    by_fixed: dict[int, list[Axis]] = {}
    for m in fixed:
        by_fixed.setdefault(shapes[m[0]][m[1]], []).append(m)
    for size, members in sorted(by_fixed.items()):
        ks = [k for k, v in enumerate(init) if type(v) is int and v == size]
        if ks and runs({m: size + 1 for m in members}, {k: size + 1 for k in ks}) is not None:
            tied.append((sorted(members), ks))
        else:
            still += members
    dims = []
    for group, ks in tied:
        size = shapes[group[0][0]][group[0][1]]
        lo = next((s for s in _SMALL if s < size and runs({m: s for m in group}, {k: s for k in ks}) is not None),
                  size)
        dims.append({"axes": [list(m) for m in group], "size": size, "lo": lo, "init": ks,
                     "reduced": _mixes(model, described, shapes, group)})
    fixed = still
    result["dims"] = dims
    result["differentiable"] = _differentiable(model, described, shapes)
    result["fixed"] = [list(m) for m in sorted(fixed)]
    return result


def reductions(definition: Path, sizes: dict[str, int], scalars: dict[str, Any]) -> dict[str, bool]:
    """For a definition (the SOL-ExecBench format): which axes its reference's ``run()`` reduces over."""
    import torch

    defn = json.loads(definition.read_text())
    namespace: dict[str, Any] = {"__name__": "_gg_reference"}
    exec(compile(defn["reference"], f"{definition}:reference", "exec"), namespace)
    run = namespace["run"]
    g = torch.Generator().manual_seed(0)
    args: list[Any] = []
    for name, t in defn["inputs"].items():
        if t.get("shape") is None:
            args.append(scalars[name])
        else:
            shape = [sizes[a] for a in t["shape"]]
            args.append(torch.randn(*shape, generator=g).to(getattr(torch, t["dtype"])).float())
    with torch.no_grad():
        before = _first(run(*args))
    out: dict[str, bool] = {}
    for axis in defn["axes"]:
        bumped = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        touched = False
        for (name, t), b in zip(defn["inputs"].items(), bumped):
            if not isinstance(b, torch.Tensor) or axis not in (t.get("shape") or ()) or sizes[axis] < 2:
                continue
            index = [0] * b.dim()
            index[list(t["shape"]).index(axis)] = sizes[axis] - 1
            b[tuple(index)] += 3.0
            touched = True
        with torch.no_grad():
            out[axis] = touched and _first(run(*bumped)) != before
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 3 and args[0] == "--definition":
        given = json.loads(args[2])
        print(json.dumps(reductions(Path(args[1]), given["sizes"], given["scalars"])))
        return 0
    if len(args) != 1:
        print("usage: python -m gpu_gate.audit.probe PROBLEM.py", file=sys.stderr)
        return 2
    print(json.dumps(probe(Path(args[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
