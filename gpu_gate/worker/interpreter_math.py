"""The arithmetic that Triton's interpreter gets wrong or lacks, done as the GPU does it, on numpy
arrays (see :mod:`.interpreter`, which puts it in place).

- bfloat16 is held as its raw 16 bits (``uint16``). Values go to float32 exactly (the bits are the top
  half of a float32), and come back rounded to nearest, ties to even, as ``cvt.rn.bf16.f32`` does.
  Every operation of the GPU on bfloat16 data rounds its result to bfloat16; float32 holds more
  than twice bfloat16's precision, so one float32 operation rounded once gives the same bits.
- Sums of float16 and bfloat16 values: the GPU adds them in their own dtype, each partial sum
  rounded, in a tree; numpy would accumulate float16 in float32 and hide a kernel that sums in
  half precision. :func:`tree_sum` adds pairwise and rounds every partial sum.
- libdevice (``triton.language.extra.libdevice``): the functions computed in float64 and rounded
  once to their dtype, within an ulp of libdevice's own.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

BF16_NAN = np.uint16(0x7FC0)
BF16_STORAGE = np.uint16  # how the interpreter holds bfloat16: its bits

Array: TypeAlias = "npt.NDArray[np.generic]"  # an array of any dtype, as the interpreter holds its data


def bf16_to_f32(bits: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """bfloat16 bits as float32 values (exact)."""
    return (np.asarray(bits).astype(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(values: npt.ArrayLike, toward_zero: bool = False) -> npt.NDArray[np.uint16]:
    """float32 values rounded to bfloat16 bits: to nearest, ties to even (``toward_zero``: truncated)."""
    x = np.asarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    if toward_zero:
        out = (bits >> np.uint32(16)).astype(np.uint16)
    else:
        bias = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        out = ((bits + bias) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(x), (bits >> np.uint32(16)).astype(np.uint16) | BF16_NAN, out)


def f64_to_f32_odd(values: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """float64 values as float32, rounded to odd: a second rounding to a narrower format (bfloat16)
    then rounds once, as a direct conversion would."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        away = np.abs(f.astype(np.float64)) > np.abs(x)
        f = np.where(away & np.isfinite(x), np.nextafter(f, np.float32(0)), f)
        inexact = (f.astype(np.float64) != x) & np.isfinite(x)
    bits: npt.NDArray[np.uint32] = f.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


def to_bf16(values: npt.ArrayLike) -> npt.NDArray[np.uint16]:
    """Any float or integer values rounded once to bfloat16 bits."""
    a = np.asarray(values)
    if a.dtype == np.float32:
        return f32_to_bf16(a)
    return f32_to_bf16(f64_to_f32_odd(a.astype(np.float64)))


def round_to(values: npt.ArrayLike, dtype: npt.DTypeLike) -> Array:
    """float32 values rounded to ``dtype``'s storage: bfloat16 bits (uint16), or float16."""
    if dtype == np.uint16:
        return f32_to_bf16(values)
    return np.asarray(values).astype(dtype)


def widen(data: npt.ArrayLike, is_bf16: bool) -> Array:
    """Values for arithmetic: bfloat16 bits as float32, float16 as float32, others unchanged."""
    if is_bf16:
        return bf16_to_f32(data)
    a = np.asarray(data)
    return a.astype(np.float32) if a.dtype == np.float16 else a


def tree_sum(values: npt.ArrayLike, axis: int | None, keepdims: bool, dtype: npt.DTypeLike) -> Array:
    """The sum of float32 ``values`` along ``axis`` as a GPU's reduction in ``dtype`` (float16, or
    bfloat16 as uint16 bits) makes it: pairwise, every partial sum rounded to ``dtype``. Returns
    the result in ``dtype``'s storage."""
    a = np.asarray(values, dtype=np.float32)
    if axis is None:
        out = tree_sum(a.reshape(-1), 0, False, dtype)
        return out.reshape((1,) * a.ndim) if keepdims else out
    a = np.moveaxis(a, axis, -1)
    while a.shape[-1] > 1:
        n = a.shape[-1]
        if n % 2:
            a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), np.float32)], axis=-1)
        pairs = a[..., 0::2] + a[..., 1::2]
        # float32 sums rounded to float16 or bfloat16 and widened again: float32
        a = cast("npt.NDArray[np.float32]", widen(round_to(pairs, dtype), dtype == np.uint16))
    out = a[..., 0] if a.shape[-1] == 1 else np.zeros(a.shape[:-1], np.float32)
    if keepdims:
        out = np.expand_dims(out, axis)
    return round_to(out, dtype)


def running_sum(values: npt.ArrayLike, axis: int, dtype: npt.DTypeLike) -> Array:
    """A cumulative sum along ``axis`` with every partial sum rounded to ``dtype`` (storage out)."""
    return running(values, axis, dtype, np.add)


def running_product(values: npt.ArrayLike, axis: int, dtype: npt.DTypeLike) -> Array:
    return running(values, axis, dtype, np.multiply)


def running(values: npt.ArrayLike, axis: int, dtype: npt.DTypeLike, op: np.ufunc) -> Array:
    """A scan along ``axis`` with every partial result rounded to ``dtype`` (storage out)."""
    a = np.moveaxis(np.asarray(values, dtype=np.float32), axis, 0)
    out = np.empty(a.shape, np.float32)
    acc = a[0] if a.shape[0] else np.zeros(a.shape[1:], np.float32)
    for i in range(a.shape[0]):
        acc = a[0] if i == 0 else widen(round_to(op(acc, a[i]), dtype), dtype == np.uint16)
        out[i] = acc
    return round_to(np.moveaxis(out, 0, axis), dtype)


# --- libdevice --------------------------------------------------------------------------------

F64: TypeAlias = "npt.NDArray[np.float64]"  # the functions' arguments: computed in float64


def _vectorized(fn: Callable[[float], float]) -> Callable[[F64], npt.ArrayLike]:
    return np.vectorize(fn, otypes=[np.float64])


def _round_half_away(x: F64) -> npt.ArrayLike:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


_UNARY: dict[str, Callable[[F64], npt.ArrayLike]] = {
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sqrt": np.sqrt, "exp": np.exp, "exp2": np.exp2,
    "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "erf": _vectorized(math.erf), "erfc": _vectorized(math.erfc),
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "nearbyint": np.rint,
    "round": _round_half_away, "cbrt": np.cbrt, "rcbrt": lambda x: 1.0 / np.cbrt(x), "fabs": np.abs,
    "saturate": lambda x: np.clip(x, 0.0, 1.0), "rcp": lambda x: 1.0 / x,
}
_BINARY: dict[str, Callable[[F64, F64], npt.ArrayLike]] = {
    "pow": np.power, "powi": np.power, "atan2": np.arctan2, "hypot": np.hypot, "fmod": np.fmod,
    "copysign": np.copysign, "fdim": lambda x, y: np.maximum(x - y, 0.0), "div": np.divide,
    "nextafter": np.nextafter,
}
_PREDICATE: dict[str, Callable[[F64], npt.ArrayLike]] = {
    "isnan": np.isnan, "isinf": np.isinf, "signbit": np.signbit, "finite": np.isfinite,
}
# libdevice's symbol -> (table entry, its float64 twin's symbol suffix dropped): the symbols of the
# functions above, fp32 (``__nv_tanhf``) and fp64 (``__nv_tanh``), and the ones named otherwise.
_ALIASES = {
    "fast_expf": "exp", "fast_logf": "log", "fast_log2f": "log2", "fast_log10f": "log10", "fast_exp10f": "exp10",
    "fast_sinf": "sin", "fast_cosf": "cos", "fast_tanf": "tan", "fast_powf": "pow", "fast_fdividef": "div",
    "saturatef": "saturate", "frcp_rn": "rcp", "drcp_rn": "rcp", "fsqrt_rn": "sqrt", "dsqrt_rn": "sqrt",
    "frsqrt_rn": "rsqrt", "fdiv_rn": "div", "ddiv_rn": "div", "fabsf": "fabs", "fabs": "fabs",
    "isnanf": "isnan", "isnand": "isnan", "isinff": "isinf", "isinfd": "isinf", "signbitf": "signbit",
    "signbitd": "signbit", "finitef": "finite", "isfinited": "finite", "powif": "powi", "powi": "powi",
}


def libdevice_function(symbol: str) -> tuple[str, Callable[..., npt.ArrayLike]] | None:
    """The name and float64 implementation of a libdevice symbol (``__nv_rsqrtf``), or None."""
    name = symbol.removeprefix("__nv_")
    name = _ALIASES.get(name, name)
    for table in (_UNARY, _BINARY, _PREDICATE):
        if name in table:
            return name, table[name]
        if name.endswith("f") and name[:-1] in table:
            return name[:-1], table[name[:-1]]
    return None


def libdevice_call(symbol: str, args: Sequence[npt.ArrayLike], out_dtype: npt.DTypeLike) -> Array:
    """Compute a libdevice function on numpy arrays in float64, rounded once to ``out_dtype``."""
    found = libdevice_function(symbol)
    if found is None:
        raise NotImplementedError(f"libdevice function {symbol} has no CPU implementation in gpu-gate's "
                                  f"interpreter adaptations")
    name, fn = found
    wide = [np.asarray(a).astype(np.float64) for a in args]
    with np.errstate(all="ignore"):
        out = fn(*wide)
    if name in _PREDICATE:
        return np.asarray(out).astype(out_dtype)
    return np.asarray(out).astype(out_dtype)
