"""The spec skeleton ``gpu-gate init`` writes for an entry point (see :mod:`gpu_gate.init_entry`): its
arguments become the spec's inputs (tensors) and constants (everything else, at their defaults),
with dims and dtypes to check, ``grads=`` where the entry point has a backward, and the call as the
library's users make it (``Function.apply``, the module's forward, or the function).

Which argument is a tensor is read from the signature alone: an annotation says so; an argument
with a default, or named like a scalar (``eps``, ``*_mode``, ``num_*``), is a constant; the rest are
tensors. Tensors named like a weight or a bias span the last dim, like index tensors (``target``,
``ids``) span the rows. Every guess is marked TODO(gpu-gate), and the reference raises until it is
written: a spec that passed before anyone wrote its reference would check nothing.
"""
from __future__ import annotations

import ast
import dataclasses
import keyword
import re
import textwrap

from .init_entry import Entry, Param

DTYPES = '["float32", "float16", "bfloat16"]'
SCALAR_NAMES = re.compile(r"^(eps|epsilon|.*_eps|scale|.*_scale|alpha|offset|.*_offset|mode|.*_mode|reduction|dim|"
                          r"axis|in_?place|num_.*|n_.*|.*_size|.*_index|ignore_index|label_smoothing|softcap|"
                          r".*_multiplier|momentum|training|return_.*|p|k|.*_dim|causal|.*_factor|temperature|"
                          r"beta_?\d|.*_ratio|.*_idx)$", re.IGNORECASE)
VECTOR_NAMES = re.compile(r"^(w|weight|bias|gamma|beta|.*_?weight|.*_?bias)$", re.IGNORECASE)
INDEX_NAMES = re.compile(r"^(target|targets|label|labels|ids|input_ids|idx|index|indices|position_ids|positions|"
                         r"token_ids|.*_ids)$", re.IGNORECASE)
WIDTH_NAMES = re.compile(r"^(hidden_size|hidden_dim|dim|d_model|num_features|normalized_shape|embed_dim|n_embd|"
                         r"size|num_channels|features)$", re.IGNORECASE)
SCALAR_ANNOTATIONS = re.compile(r"^(float|int|bool|str)$|Literal")


@dataclasses.dataclass(frozen=True)
class Arg:
    param: Param
    role: str  # "data" (rows, cols), "vector" (cols,), "index" (rows,), "constant"
    value: str  # a constant's source text (its default, else a guess); unused for tensors

    @property
    def const(self) -> str:
        name = re.sub(r"\W", "_", self.param.name).strip("_").upper() or "ARG"
        return f"{name}_" if keyword.iskeyword(name) else name


def classify(params: tuple[Param, ...]) -> list[Arg]:
    # a lone `b` is a second operand (swiglu's `a, b`); beside a weight it is the bias
    weighted = any(VECTOR_NAMES.match(p.name) for p in params)
    return [_classify(p, weighted) for p in params]


def _classify(p: Param, weighted: bool) -> Arg:
    ann = (p.annotation or "").replace(" ", "")
    if "Tensor" in ann and ("Optional" in ann or "None" in ann):
        return Arg(p, "constant", p.default or "None")
    if "Tensor" in ann:
        return Arg(p, _tensor_role(p.name, weighted), "")
    if SCALAR_ANNOTATIONS.search(ann) or p.default is not None or SCALAR_NAMES.match(p.name):
        return Arg(p, "constant", p.default if p.default is not None else _guess(p.name))
    return Arg(p, _tensor_role(p.name, weighted), "")


def _tensor_role(name: str, weighted: bool) -> str:
    if INDEX_NAMES.match(name):
        return "index"
    return "vector" if VECTOR_NAMES.match(name) or (weighted and name in ("b", "B")) else "data"


def _guess(name: str) -> str:
    return "1e-6" if "eps" in name.lower() else "None"


def _tensors(args: list[Arg]) -> list[Arg]:
    return [a for a in args if a.role != "constant"]


def _inputs(tensors: list[Arg]) -> list[str]:
    """``"name": gg.Tensor(...)`` lines: the first data tensor (else the first float one) carries the
    dtypes, the others follow it."""
    floats = [a for a in tensors if a.role != "index"]
    lead = next((a for a in floats if a.role == "data"), floats[0] if floats else None)
    out = []
    for a in tensors:
        name = a.param.name
        if a.role == "index":
            out.append(f'"{name}": gg.Index(("rows",), high="cols")')
            continue
        shape = '("cols",)' if a.role == "vector" else '("rows", "cols")'
        dtype = f"dtypes={DTYPES}" if a is lead else f'dtype="like:{lead.param.name}"' if lead else ""
        out.append(f'"{name}": gg.Tensor({shape}, {dtype})')
    return out


@dataclasses.dataclass(frozen=True)
class Rendered:
    text: str
    func: str


def render(entry: Entry, module: str, path: str, spec_path: str, reduces: bool, func: str) -> Rendered:
    """The skeleton's text for ``entry`` (defined in ``module``, file ``path``), its spec function named
    ``func``. ``reduces``: the kernels it launches reduce (``tl.sum``, ``tl.max``, ...): the last dim
    is marked as a reduction."""
    args = classify(entry.params)
    tensors = _tensors(args)
    extra = [Arg(Param(n, None, None), "vector", "") for n in entry.parameters
             if n not in {a.param.name for a in tensors}]
    tensors += extra
    names = [a.param.name for a in tensors]
    constants = [a for a in args if a.role == "constant"]
    # a module is differentiable through whatever it calls; a Function or a function only with a backward
    grads = [a.param.name for a in tensors if a.role != "index"] if entry.backward or entry.kind == "module" else []
    lines = [_header(entry, path, spec_path, constants, grads), "import torch  # noqa: F401  (the reference uses it)",
             "", "import gpu_gate as gg", "from gpu_gate.spec import upcast  # noqa: F401  (see the reference)",
             f"from {module} import {entry.name}", ""]
    if constants:
        lines += ["# The arguments that are not tensors, at the values the entry point's signature gives them.",
                  "# TODO(gpu-gate): the values the library's users pass."]
        lines += [f"{a.const} = {a.value}" for a in constants] + [""]
    lines += ["", f"def reference({', '.join(names)}):",
              f"    # TODO(gpu-gate): what {entry.call} computes, in plain torch. gpu-gate runs it in float64 on the",
              "    # same inputs (the truth), and in their own dtype (the baseline of the tolerance). Where the kernels",
              "    # compute in float32, write upcast(x) rather than x.float(): it keeps float64 inputs in float64.",
              f'    raise NotImplementedError("TODO(gpu-gate): write the reference for {entry.name} in {spec_path}")',
              "", "", "@gg.spec(",
              "    # TODO(gpu-gate): the sizes the library's users run; reduction=True on every dim the kernels sum "
              "or max over.",
              f'    dims={{"rows": gg.Dim(1, 4096), "cols": gg.Dim(1, 8192{", reduction=True" if reduces else ""})}},',
              "    # TODO(gpu-gate): the shapes (guessed from the names) and the dtypes the kernels support.",
              "    inputs={" + ",\n            ".join(_inputs(tensors)) + "},",
              "    reference=reference,"]
    if grads:
        why = "has a backward" if entry.backward else "is trained through"
        lines += [f"    # {entry.name} {why}: the gradients of these inputs are checked too",
                  f"    grads={grads!r},".replace("'", '"')]
    lines += [f'    covers=["{path}"],', ")", f"def {func}({', '.join(names)}):", *_call(entry, args, extra)]
    return Rendered("\n".join(lines) + "\n", func)


def _header(entry: Entry, path: str, spec_path: str, constants: list[Arg], grads: list[str]) -> str:
    kernels = ", ".join(sorted({launch.kernel for launch in entry.launches}))
    what = {"autograd": "torch.autograd.Function", "module": "nn.Module", "function": "function"}[entry.kind]
    guessed = [a.param.name for a in constants if a.param.default is None]
    parts = ["inputs", *(["constants"] if constants else []), *(["grads="] if grads else [])]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    read = (f"The {what} `{entry.name}` launches {kernels}. Its {listed} were read from its signature"
            f"{' (no default for ' + ', '.join(guessed) + ': guessed)' if guessed else ''}. Fill in every "
            f"TODO(gpu-gate): until the reference is written this spec fails on purpose, so that no check passes "
            f"without one. How to write a spec: docs/specs.md of gpu-gate. Try it with:")
    return (f'"""Gate spec for `{entry.call}` ({path}:{entry.line}),\nwritten by `gpu-gate init`.\n\n'
            f"{textwrap.fill(read, 100)}\n    gpu-gate check --cpu --spec {spec_path}\n\"\"\"\n")


def _call(entry: Entry, args: list[Arg], extra: list[Arg]) -> list[str]:
    kwonly = _kwonly(entry)
    parts = [(a.const if a.role == "constant" else a.param.name) for a in args if a.param.name not in kwonly]
    parts += [f"{a.param.name}={a.const if a.role == 'constant' else a.param.name}" for a in args
              if a.param.name in kwonly]
    if entry.kind != "module":
        return [textwrap.fill(f"return {entry.call}({', '.join(parts)})", 110, initial_indent="    ",
                              subsequent_indent=" " * (12 + len(entry.call)), break_on_hyphens=False)]
    lead = next((a.param.name for a in args if a.role == "data"), None)
    ctor = [f"{lead}.shape[-1]" if WIDTH_NAMES.match(p.name) and lead else (p.default or "None")
            for p in entry.init_params if p.default is None]
    owned = ", ".join(f'"{a.param.name}": {a.param.name}' for a in extra)
    return [f"    # TODO(gpu-gate): the constructor's arguments ({', '.join(p.name for p in entry.init_params)}).",
            f"    module = {entry.name}({', '.join(ctor)}).to({lead or 'None'}.device)",
            f"    return torch.func.functional_call(module, {{{owned}}}, ({', '.join(parts)}{',' if len(parts) == 1 else ''}))"]


def _kwonly(entry: Entry) -> set[str]:
    """Keyword-only arguments are passed by name; the others in order (``Function.apply`` takes no keywords)."""
    return {p.name for p in entry.params if p.kwonly}


def reduces(tree: ast.Module, kernels: set[str], aliases: dict[str, str]) -> bool:
    """Whether any of ``kernels`` (functions of ``tree``) calls a Triton reduction."""
    from .. import pyscan

    wanted = {f"triton.language.{n}" for n in ("sum", "max", "min", "reduce", "cumsum", "cumprod", "dot", "argmax",
                                              "argmin", "xor_sum", "associative_scan")}
    for fn in pyscan.functions(tree):
        if fn.name in kernels:
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and pyscan.qualified_name(node.func, aliases) in wanted:
                    return True
    return False
