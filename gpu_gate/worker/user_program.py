"""The disguised replay's program: a spec's candidate run the way a user's own script runs it.

gpu-gate never imports this file. Its text is written, as ``train.py``, into a directory of its own
and run as ``python train.py``, from the repository, in a sandbox in which no file of gpu-gate's
installation is shown (see :mod:`gpu_gate.executor.disguised`): no gate module is loaded or
loadable, the command line, the environment and torch's settings are a training job's, and the
caches start empty in a home directory of its own. A kernel that recognises the gate's worker and
takes its honest path only there takes its other path here (see :mod:`gpu_gate.judge.disguised`).

It reads ``job.json`` (the spec's file and name, the import path, the device) from its directory,
imports torch and the spec, and waits for a line on its standard input: ``go`` once the judge has
written ``batch.json`` (the cases: dims, inputs, upstream gradients) and ``batch.bin`` (the inputs'
bytes), anything else (the end of the input) to stop. So the import, the slow part for a library that
imports much, happens while the job's cases run, and the cases are chosen after them. It calls the
candidate on each case, and writes ``out.json`` and ``out.bin``: each output's dtype, shape and bytes,
or how the call failed. Nothing it writes is trusted: the judge reads only what the reference's
outputs say may be there.

The spec's ``import gpu_gate`` (and ``from gpu_gate import ...``) is answered by a stand-in that
only the spec module sees (through its own ``__import__``): declarations are inert, ``empty`` is
``torch.empty``, as they are outside a gate. Everything here is the standard library and torch.
"""
import builtins
import json
import os
import sys
import types
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
FACADE = "gpu_gate"
FATAL = ("CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure",
         "misaligned address", "CUDA_ERROR_", "an illegal instruction")


class Unsupported(Exception):
    """The spec uses a part of gpu-gate that a plain process does not have."""


class _Declared:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


def _facade(torch: Any) -> tuple[types.ModuleType, dict[str, tuple[Any, dict[str, Any]]]]:
    declared: dict[str, tuple[Any, dict[str, Any]]] = {}
    gg = types.ModuleType(FACADE)

    def spec(**kw: Any) -> Any:
        def wrap(fn: Any) -> Any:
            declared[kw.get("name") or fn.__name__] = (fn, kw)
            return fn
        return wrap

    def upcast(t: Any, dtype: str = "float32") -> Any:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        return t.to(torch.promote_types(t.dtype, getattr(torch, dtype)))

    def empty(*shape: Any, dtype: Any = None, device: Any = None) -> Any:
        return torch.empty(*shape, dtype=dtype, device=device)

    def empty_like(t: Any, *, dtype: Any = None) -> Any:
        return torch.empty(tuple(t.shape), dtype=dtype or t.dtype, device=t.device)

    def missing(name: str) -> Any:
        raise Unsupported(f"the spec uses {FACADE}.{name}, which this program does not provide")

    # the spec module's names, at the top (``import gpu_gate as gg``) and where they are defined
    # (``from gpu_gate.spec import upcast``, as the skeleton `gpu-gate init` writes does)
    inner = types.ModuleType(FACADE + ".spec")
    for module in (gg, inner):
        for name, value in (("spec", spec), ("upcast", upcast), ("empty", empty), ("empty_like", empty_like),
                            ("Dim", _Declared), ("Tensor", _Declared), ("Index", _Declared), ("Tolerance", _Declared),
                            ("__getattr__", missing)):
            setattr(module, name, value)
    setattr(gg, "_spec_module", inner)
    return gg, declared


def _spec_builtins(gg: types.ModuleType) -> dict[str, Any]:
    real = builtins.__import__

    def spec_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and (name == FACADE or name.startswith(FACADE + ".")):
            if name == FACADE + ".spec" and fromlist:
                return getattr(gg, "_spec_module")
            if name != FACADE:
                raise Unsupported(f"the spec imports {name}, which this program does not provide")
            return gg
        return real(name, globals, locals, fromlist, level)

    own = dict(vars(builtins))
    own["__import__"] = spec_import
    return own


def _load_spec(batch: dict[str, Any], gg: types.ModuleType) -> None:
    import importlib.util

    path = batch["spec_file"]
    spec = importlib.util.spec_from_file_location(batch["module"], path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    setattr(module, "__builtins__", _spec_builtins(gg))
    sys.modules[batch["module"]] = module
    spec.loader.exec_module(module)


def _tensor(torch: Any, meta: dict[str, Any], blob: bytes, device: str) -> Any:
    dtype = getattr(torch, meta["dtype"])
    shape, stride = tuple(meta["shape"]), tuple(meta["stride"])
    start, size = int(meta["at"]), int(meta["nbytes"])
    flat = torch.frombuffer(bytearray(blob[start:start + size]), dtype=torch.uint8)
    values = (flat.view(dtype) if size else torch.empty((0,), dtype=dtype)).reshape(shape).to(device)
    if meta["layout"] == "contiguous" or values.dim() == 0:
        return values
    # the stride the gate's worker gave it: broadcast dims stay broadcast, the rest laid out alike
    keep = tuple(0 if s == 0 else slice(None) for s in stride)
    own = values[keep]
    kept = [s for s in stride if s != 0]
    out = torch.empty_strided(tuple(own.shape), _dense_strides(tuple(own.shape), kept), dtype=dtype, device=device)
    out.copy_(own)
    for axis, s in enumerate(stride):
        if s == 0:
            out = out.unsqueeze(axis)
    return out.expand(shape)


def _dense_strides(shape: tuple[int, ...], like: list[int]) -> tuple[int, ...]:
    """Strides of a dense tensor of ``shape`` whose dims are ordered in memory as ``like`` orders them."""
    order = sorted(range(len(shape)), key=lambda i: like[i])
    strides, step = [0] * len(shape), 1
    for i in order:
        strides[i] = step
        step *= max(1, shape[i])
    return tuple(strides)


def _upstream(torch: Any, recipe: Any, device: str) -> dict[str, Any]:
    grads = {}
    for k, r in (recipe or {}).items():
        gen = torch.Generator(device=device)
        gen.manual_seed(int(r["seed"]))
        g = torch.randn([int(n) for n in r["shape"]], generator=gen, device=device, dtype=torch.float64)
        if r.get("expanded") and g.dim() >= 1 and g.shape[0] > 1:
            g = g[:1].expand(g.shape).clone()
        grads[str(k)] = g
    return grads


def _outputs(out: Any) -> dict[str, Any]:
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return {f"out{i}": v for i, v in enumerate(out)}
    return {"out": out}


def _call(torch: Any, fn: Any, inputs: dict[str, Any], kwargs: dict[str, Any], grads: tuple[str, ...],
          upstream: dict[str, Any]) -> dict[str, Any]:
    if not grads:
        return _outputs(fn(**inputs, **kwargs))
    leaves = {g: inputs[g].detach().requires_grad_(True) for g in grads}
    outs = _outputs(fn(**{**inputs, **leaves}, **kwargs))
    diff = {k: v for k, v in outs.items() if isinstance(v, torch.Tensor) and v.requires_grad and k in upstream}
    if diff:
        gos = [upstream[k].to(v.dtype) for k, v in diff.items()]
        got = torch.autograd.grad(list(diff.values()), list(leaves.values()), gos, allow_unused=True)
        for name, g in zip(leaves, got):
            outs[f"grad:{name}"] = g
    return {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in outs.items()}


def _interpreter(exc: BaseException) -> str | None:
    """What Triton's interpreter cannot run, said (None: not that): an operation it lacks, or an
    autotuned kernel, whose autotuner times its configs on a GPU driver there is none of (raised from
    Triton's own driver)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if type(cur).__name__ == "InterpreterError" and type(cur).__module__.startswith("triton"):
            return _line(exc)
        if (os.environ.get("TRITON_INTERPRET") == "1" and type(cur) is RuntimeError
                and str(cur).startswith("0 active drivers") and _raised_in(cur, os.path.join("triton", "runtime"))):
            return f"Triton's interpreter cannot autotune (no GPU to time the configs on): {_line(cur)}"
        cur = cur.__cause__ or cur.__context__
    return None


def _raised_in(exc: BaseException, where: str) -> bool:
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and where in last.tb_frame.f_code.co_filename


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


def _write(torch: Any, outs: dict[str, Any], blob: bytearray) -> dict[str, Any]:
    done = {}
    for k, v in outs.items():
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous().cpu()
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            done[k] = {"kind": "tensor", "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                       "at": len(blob), "nbytes": len(raw)}
            blob.extend(raw)
        elif v is None or isinstance(v, (bool, int, float)):
            done[k] = {"kind": "value", "value": v}
        else:
            done[k] = {"kind": "other", "type": type(v).__name__}
    return done


def main() -> None:
    with open(os.path.join(HERE, "job.json"), encoding="utf-8") as f:
        batch = json.load(f)
    import torch

    for entry in reversed(batch["path"]):
        if entry not in sys.path:
            sys.path.insert(1, entry)
    device = batch["device"]
    results, blob = [], bytearray()
    load = {"status": "ok"}
    try:
        gg, declared = _facade(torch)
        _load_spec(batch, gg)
        if batch["name"] not in declared:
            raise Unsupported(f"the spec module declares no spec named {batch['name']!r} here")
        fn, kw = declared[batch["name"]]
    except Unsupported as exc:
        load = {"status": "unsupported", "message": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - reported, as a user's run would show it
        load = {"status": "failed", "message": f"the spec did not import: {_line(exc)}"}
    if sys.stdin.readline().strip() != "go":
        return
    with open(os.path.join(HERE, "batch.json"), encoding="utf-8") as f:
        batch["cases"] = json.load(f)["cases"]
    with open(os.path.join(HERE, "batch.bin"), "rb") as f:
        given = f.read()
    if load["status"] == "ok":
        params, dim_args, grads = dict(kw.get("params") or {}), tuple(kw.get("dim_args") or ()), tuple(kw.get("grads") or ())
        for case in batch["cases"]:
            try:
                inputs = {k: _tensor(torch, m, given, device) for k, m in case["inputs"].items()}
                kwargs = {**params, **{d: int(case["dims"][d]) for d in dim_args}}
                outs = _call(torch, fn, inputs, kwargs, grads, _upstream(torch, case.get("upstream"), device))
                if device == "cuda":
                    torch.cuda.synchronize()
                results.append({"status": "ok", "outputs": _write(torch, outs, blob)})
            except Unsupported as exc:
                results.append({"status": "unsupported", "message": str(exc)})
            except BaseException as exc:  # noqa: BLE001 - the kernel's failure is the result
                oom = type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc)
                unsupported = _interpreter(exc)
                status = "unsupported" if unsupported else "oom" if oom else "failed"
                results.append({"status": status, "message": unsupported or _line(exc)})
                if any(m in str(exc) for m in FATAL):
                    break  # the CUDA context is gone: the other cases cannot run
    with open(os.path.join(HERE, "out.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(HERE, "out.json"), "w", encoding="utf-8") as f:
        json.dump({"load": load, "results": results}, f)


if __name__ == "__main__":
    main()
