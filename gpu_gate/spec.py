"""The gate-spec API: how a user says how to call a kernel and what it must equal.

    import torch, gpu_gate as gg
    from mylib.kernels import rmsnorm

    @gg.spec(
        dims={"rows": gg.Dim(1, 65536), "hidden": gg.Dim(1, 16384, reduction=True)},
        inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "float16", "bfloat16"]),
                "w": gg.Tensor(("hidden",), dtype="like:x")},
        reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
        grads=["x", "w"],
    )
    def rmsnorm_gate(x, w):
        return rmsnorm(x, w)

This module never imports torch at import time: ``plan`` reads specs statically,
and only the sandboxed workers import spec modules.
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .errors import SpecError

if TYPE_CHECKING:
    import torch

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
FLOAT_DISTS = ("normal", "uniform_pos", "offset", "heavy_tail", "peaked", "neg_inf_spans", "ties", "denormal")
INDEX_DISTS = ("uniform", "zipf", "same", "sorted")
INDEX_LAYOUTS = ("contiguous", "sliced", "offset")
# contiguous; transposed (last two dims swapped in memory); sliced (every other element of
# the last dim); narrowed (a column slice of a wider tensor: unit inner stride, long row
# stride); expanded (zero stride on the first dim); offset (non-zero, misaligned storage offset)
LAYOUTS = ("contiguous", "transposed", "sliced", "narrowed", "expanded", "offset")


@dataclasses.dataclass(frozen=True)
class Dim:
    """A named size. ``reduction=True`` marks a dimension the kernel reduces over:
    its length is fuzzed up to 2**18 and the error growth along it is measured."""

    lo: int
    hi: int
    reduction: bool = False
    multiple_of: int = 1
    values: tuple[int, ...] | None = None  # an explicit set of sizes instead of a range

    def __post_init__(self) -> None:
        if self.lo < 0 or self.hi < self.lo:
            raise SpecError(f"Dim({self.lo}, {self.hi}): need 0 <= lo <= hi")
        if self.multiple_of < 1:
            raise SpecError(f"Dim(multiple_of={self.multiple_of}): must be >= 1")
        if self.values is not None:
            object.__setattr__(self, "values", tuple(int(v) for v in self.values))

    def allows(self, n: int) -> bool:
        if self.values is not None:
            return n in self.values
        return self.lo <= n <= self.hi and n % self.multiple_of == 0


@dataclasses.dataclass(frozen=True)
class Tensor:
    """A floating-point input. ``dtype="like:x"`` ties its dtype to input ``x``."""

    # Sequences as a spec writes them (lists are fine); stored as tuples.
    shape: Sequence[str | int]
    dtypes: Sequence[str] | None = None
    dtype: str | None = None
    dists: Sequence[str] | None = None  # None: every float distribution
    layouts: Sequence[str] | None = None  # None: every layout the rank allows
    grad: bool = True  # may receive a gradient when listed in ``grads``

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.dtypes is not None:
            object.__setattr__(self, "dtypes", tuple(self.dtypes))
        if (self.dtypes is None) == (self.dtype is None):
            if self.dtypes is None:
                object.__setattr__(self, "dtypes", ("float32",))
            else:
                raise SpecError("Tensor: give dtypes=[...] or dtype=..., not both")
        for d in self.dtypes or ():
            if d not in FLOAT_DTYPES:
                raise SpecError(f"Tensor: unknown dtype {d!r} (one of {', '.join(FLOAT_DTYPES)})")
        if self.dtype is not None and not self.dtype.startswith("like:") and self.dtype not in FLOAT_DTYPES:
            raise SpecError(f"Tensor: unknown dtype {self.dtype!r} (a float dtype, or 'like:<input>')")
        _check_subset("dists", self.dists, FLOAT_DISTS, self)
        _check_subset("layouts", self.layouts, LAYOUTS, self)


@dataclasses.dataclass(frozen=True)
class Index:
    """An integer index tensor with values in ``[0, high)``; ``high`` is a dim name or an int.

    ``peak_of="logits"`` couples it to a float input: that tensor (shape ``(*shape, high)``)
    peaks where the index points, as a classifier's logits peak at the label. The label's
    logit is set to ``logsumexp(other logits) + margin``, so its softmax probability is
    ``sigmoid(margin)``; the margin is swept so that it ranges over 0.5 .. 1 - 1e-6."""

    shape: tuple[str | int, ...]
    high: str | int
    dtype: str = "int64"
    dists: tuple[str, ...] | None = None  # None: uniform, zipf, same, sorted
    layouts: tuple[str, ...] | None = None  # None: contiguous, sliced, offset
    peak_of: str | None = None  # a float input that peaks at this index (logits at the label)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.dtype not in INT_DTYPES:
            raise SpecError(f"Index: unknown dtype {self.dtype!r} (one of {', '.join(INT_DTYPES)})")
        _check_subset("dists", self.dists, INDEX_DISTS, self)
        _check_subset("layouts", self.layouts, INDEX_LAYOUTS, self)


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Per-spec tolerance. Default rule: error <= baseline_factor x baseline error + dtype floor.
    ``atol``/``rtol`` switch to a fixed elementwise rule; give both or neither."""

    baseline_factor: float | None = None
    atol: float | None = None
    rtol: float | None = None

    def __post_init__(self) -> None:
        if (self.atol is None) != (self.rtol is None):
            raise SpecError("Tolerance: give atol and rtol together, or neither")
        for what in ("baseline_factor", "atol", "rtol"):
            v = getattr(self, what)
            if v is not None and not v >= 0:
                raise SpecError(f"Tolerance: {what}={v!r} must be a number >= 0")
        if self.baseline_factor is not None and self.baseline_factor == 0:
            raise SpecError("Tolerance: baseline_factor must be > 0 (use atol/rtol for a fixed tolerance)")


def _check_subset(what: str, got: Sequence[str] | None, allowed: Sequence[str], owner: object) -> None:
    if got is None:
        return
    object.__setattr__(owner, what, tuple(got))
    bad = [g for g in got if g not in allowed]
    if bad:
        raise SpecError(f"{type(owner).__name__}: unknown {what} {bad} (choose from {', '.join(allowed)})")


Input = Tensor | Index


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    fn: Callable[..., Any]
    dims: Mapping[str, Dim]
    inputs: Mapping[str, Input]
    reference: Callable[..., Any]
    params: Mapping[str, object]
    dim_args: tuple[str, ...]
    grads: tuple[str, ...]
    covers: tuple[str, ...]
    deterministic: bool
    tolerance: Tolerance
    devices: tuple[str, ...]
    checks: tuple[str, ...] | None
    module: str
    file: str
    line: int
    accumulate: str | None = None  # None: float32, or the data's dtype where that is wider
    mutates: Mapping[str, str] = dataclasses.field(default_factory=dict)  # input -> the output it holds after
    producer: tuple[str, ...] = ()  # inputs another kernel writes just before the call (the determinism check)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def float_inputs(self) -> dict[str, Tensor]:
        return {k: v for k, v in self.inputs.items() if isinstance(v, Tensor)}

    def dtype_choices(self) -> tuple[str, ...]:
        """The dtypes of the first float input that has its own list (the spec's "primary" dtype)."""
        for t in self.float_inputs().values():
            if t.dtypes:
                return tuple(t.dtypes)
        return ("float32",)


_REGISTRY: dict[str, list[Spec]] = {}


def _check_peak(where: str, iname: str, inp: Index, inputs: Mapping[str, Input]) -> None:
    target = inputs.get(inp.peak_of or "")
    if not isinstance(target, Tensor):
        raise SpecError(f"{where}: index {iname!r} has peak_of={inp.peak_of!r}, which is not a float input")
    want = (*inp.shape, inp.high)
    if tuple(target.shape) != want:
        raise SpecError(f"{where}: index {iname!r} has peak_of={inp.peak_of!r}, whose shape {tuple(target.shape)} "
                        f"should be the index's shape plus high: {want}")


def _check_mutates(name: str, inputs: Mapping[str, Input], mutates: Mapping[str, str]) -> None:
    where = f"spec {name!r}"
    if not isinstance(mutates, Mapping):
        raise SpecError(f"{where}: mutates= must be a dict of input name -> output name, e.g. {{'a': 'grad:a'}}")
    for iname, target in mutates.items():
        if iname not in inputs:
            raise SpecError(f"{where}: mutates names {iname!r}, which is not an input (inputs: {sorted(inputs)})")
        if not isinstance(target, str) or not target:
            raise SpecError(f"{where}: mutates[{iname!r}] must name the output it holds after the call "
                            f"('out', 'out0', a dict key, or 'grad:<input>'), not {target!r}")


def _check_producer(name: str, inputs: Mapping[str, Input], producer: Sequence[str] | str) -> tuple[str, ...]:
    where = f"spec {name!r}"
    names = (producer,) if isinstance(producer, str) else producer
    if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) and n for n in names):
        raise SpecError(f"{where}: producer= names the inputs a kernel writes just before the call, "
                        f"e.g. producer=['x'], not {producer!r}")
    for n in names:
        if n not in inputs:
            raise SpecError(f"{where}: producer names {n!r}, which is not an input (inputs: {sorted(inputs)})")
    return tuple(dict.fromkeys(names))


def _validate(name: str, dims: Mapping[str, Dim], inputs: Mapping[str, Input], grads: Sequence[str],
              fn: Callable[..., Any], dim_args: Sequence[str] = ()) -> None:
    where = f"spec {name!r}"
    for d in dim_args:
        if d not in dims:
            raise SpecError(f"{where}: dim_args names {d!r}, which is not in dims={sorted(dims)}")
        if d in inputs:
            raise SpecError(f"{where}: dim_args names {d!r}, which is also an input")
    for iname, inp in inputs.items():
        for size in inp.shape:
            if isinstance(size, str) and size not in dims:
                raise SpecError(f"{where}: input {iname!r} uses dim {size!r}, which is not in dims={sorted(dims)}")
        if isinstance(inp, Index) and isinstance(inp.high, str) and inp.high not in dims:
            raise SpecError(f"{where}: index {iname!r} has high={inp.high!r}, which is not in dims")
        if isinstance(inp, Index) and inp.peak_of is not None:
            _check_peak(where, iname, inp, inputs)
        if isinstance(inp, Tensor) and inp.dtype and inp.dtype.startswith("like:"):
            other = inp.dtype[5:]
            if not isinstance(inputs.get(other), Tensor):
                raise SpecError(f"{where}: input {iname!r} has dtype={inp.dtype!r} but {other!r} is not a float input")
    for g in grads:
        if not isinstance(inputs.get(g), Tensor):
            raise SpecError(f"{where}: grads names {g!r}, which is not a float input")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    accepts_kwargs = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    missing = [i for i in (*inputs, *dim_args) if i not in sig.parameters and not accepts_kwargs]
    if missing:
        raise SpecError(f"{where}: the function does not take input(s) {missing} as parameters")


def spec(
    *,
    dims: Mapping[str, Dim],
    inputs: Mapping[str, Input],
    reference: Callable[..., Any],
    params: Mapping[str, object] | None = None,
    dim_args: Sequence[str] = (),
    grads: Sequence[str] = (),
    covers: Sequence[str] = (),
    deterministic: bool = False,
    tolerance: Tolerance | None = None,
    devices: Sequence[str] = ("cuda", "cpu"),
    checks: Sequence[str] | None = None,
    name: str | None = None,
    accumulate: str | None = None,
    mutates: Mapping[str, str] | None = None,
    producer: Sequence[str] | str = (),
) -> Callable[[Callable[..., Any]], Spec]:
    """Declare a gate spec. The decorated function is the *candidate*: it calls the kernel.

    - ``dims``: named sizes, fuzzed within their bounds.
    - ``inputs``: ``gg.Tensor`` / ``gg.Index`` per parameter of the candidate.
    - ``reference``: the same function in plain torch; gpu-gate runs it in float64
      (the truth) and in the kernel's own dtype (the *baseline* the tolerance is relative to).
    - ``params``: constant keyword arguments passed to both (``eps=1e-6``).
    - ``dim_args``: dims passed to both as integer keyword arguments (an output size
      that no input has, e.g. the number of rows of an embedding gradient).
    - ``grads``: inputs whose gradients are checked too (backward kernels).
    - ``covers``: kernel files this spec covers, when imports do not say it.
    - ``deterministic``: outputs must be bitwise identical across runs.
    - ``devices``: where the candidate can run ("cuda", "cpu").
    - ``checks``: restrict the checks run for this spec (default: the policy's).
    - ``accumulate``: the dtype the kernel accumulates its reductions in (by default
      float32, or float64 for float64 data). The tolerance allows what a correct
      accumulation in that dtype may do (see docs/specs.md, "The rounding envelope"), so a
      kernel that accumulates in a narrower dtype than it declares fails on long reductions.
    - ``mutates``: inputs the kernel writes in place, each with the output it must hold
      afterwards, e.g. ``{"a": "grad:a"}`` for a backward that writes the gradient of ``a``
      into ``a``'s memory, or ``{"x": "out"}`` for an in-place op. The input may then change,
      and that output may be a view of it; any other write to an input is still a finding.
    - ``producer``: inputs that, in the library, another kernel writes just before this one
      reads them (the output of the previous layer, a buffer a prologue fills). On a GPU the
      determinism check then has a kernel of gpu-gate's write them right before each repeat:
      on the caller's stream, letting the candidate start early where it uses programmatic
      dependent launch, and on another stream ordered by an event. A kernel that reads them
      before its producer finished (no ``gdc_wait()`` / ``cudaGridDependencySynchronize()``, or
      work on a stream of its own that never waits for the caller's) reads garbage there.
    """
    from .protocol.rounding import ACCUMULATE_DTYPES

    if accumulate is not None and accumulate not in ACCUMULATE_DTYPES:
        raise SpecError(f"spec: accumulate={accumulate!r} is not one of {', '.join(ACCUMULATE_DTYPES)}")

    def wrap(fn: Callable[..., Any]) -> Spec:
        sname = name or fn.__name__
        _validate(sname, dims, inputs, grads, fn, dim_args)
        _check_mutates(sname, inputs, mutates or {})
        produced = _check_producer(sname, inputs, producer)
        try:
            file = inspect.getsourcefile(fn) or ""
            line = inspect.getsourcelines(fn)[1]
        except (OSError, TypeError):
            file, line = "", 0
        s = Spec(
            name=sname, fn=fn, dims=dict(dims), inputs=dict(inputs), reference=reference,
            params=dict(params or {}), dim_args=tuple(dim_args), grads=tuple(grads), covers=tuple(covers),
            deterministic=deterministic, tolerance=tolerance or Tolerance(),
            devices=tuple(devices), checks=tuple(checks) if checks is not None else None,
            module=fn.__module__, file=file, line=line, accumulate=accumulate, mutates=dict(mutates or {}),
            producer=produced,
        )
        # Importing a module again (a re-run in the same process) replaces its specs, so the
        # worker never runs a stale function from an earlier import.
        known = _REGISTRY.setdefault(fn.__module__, [])
        known[:] = [k for k in known if k.name != sname]
        known.append(s)
        return s

    return wrap


def specs_in_module(module_name: str) -> list[Spec]:
    return list(_REGISTRY.get(module_name, []))


_T = TypeVar("_T")


@overload
def upcast(t: torch.Tensor, dtype: str = "float32") -> torch.Tensor: ...
@overload
def upcast(t: _T, dtype: str = "float32") -> _T: ...
def upcast(t: object, dtype: str = "float32") -> object:
    """``t`` in at least ``dtype`` precision (float32 by default); float64 stays float64.

    For references that should compute internally in fp32 and round once at the end, as a
    fused kernel does: ``reference=lambda x: f(upcast(x)).to(x.dtype)``. The float64 run is
    unaffected, and the baseline (the reference with the kernel's dtypes) then measures
    what fp32 arithmetic with dtype storage achieves, instead of whatever intermediate
    roundings torch's own low-precision path happens to make on this device."""
    import torch

    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return t
    return t.to(torch.promote_types(t.dtype, getattr(torch, dtype)))
