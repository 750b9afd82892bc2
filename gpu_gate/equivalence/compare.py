"""Comparison against the float64 reference, relative to the baseline's error.

Rule (after the FlashAttention test suite): the candidate's error may be at most
``k x`` the baseline's error plus a dtype floor, where the baseline is the same
reference computed by torch in the kernel's own dtype. Three errors are measured,
each against its baseline twin: normwise relative, greatest absolute (relative to
the reference's scale) and worst element (relative, with near-zero handling).
All mismatches are collected before the message is written, phrased like
``torch.testing.assert_close``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

# Unit roundoff per dtype; floors are small multiples of it. One table, keyed by dtype.
EPS = {"float64": 2.2e-16, "float32": 1.19e-7, "float16": 9.77e-4, "bfloat16": 7.81e-3,
       "float8_e4m3fn": 0.125, "float8_e5m2": 0.25}
FLOOR_FACTOR = 4.0


@dataclasses.dataclass(frozen=True)
class Rule:
    baseline_factor: float = 2.0
    atol: float | None = None
    rtol: float | None = None


@dataclasses.dataclass
class Comparison:
    name: str
    ok: bool
    kind: str  # "ok" | "mismatch" | "nan" | "shape" | "dtype" | "constant-output" | "nonfinite"
    message: str
    error: float = 0.0  # normwise relative error of the candidate
    baseline_error: float = 0.0
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


def dtype_name(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def _index(flat_idx: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for n in reversed(shape):
        out.append(flat_idx % max(n, 1))
        flat_idx //= max(n, 1)
    return tuple(reversed(out))


def _fmt_idx(idx: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(i) for i in idx) + ("," if len(idx) == 1 else "") + ")"


def _relerr(x: Any, r: Any) -> float:
    import torch

    nr = float(torch.linalg.vector_norm(r))
    nd = float(torch.linalg.vector_norm(x - r))
    return nd / nr if nr > 0 else nd


def compare(name: str, cand: Any, ref: Any, base: Any, rule: Rule) -> Comparison:
    """``ref`` is float64; ``base`` is torch's result in the kernel's dtype (may be None)."""
    import torch

    if not isinstance(cand, torch.Tensor):
        return Comparison(name, False, "type", f"output {name!r}: expected a tensor, got {type(cand).__name__}")
    if tuple(cand.shape) != tuple(ref.shape):
        return Comparison(name, False, "shape",
                          f"output {name!r}: shape {tuple(cand.shape)} but the reference has {tuple(ref.shape)}")
    dt = dtype_name(cand)
    if base is not None and cand.dtype != base.dtype:
        return Comparison(name, False, "dtype", f"output {name!r}: dtype {dt} but torch gives {dtype_name(base)}")
    c = cand.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    b = base.detach().to(torch.float64) if base is not None else r
    numel = r.numel()
    if numel == 0:
        return Comparison(name, True, "ok", "")
    rf = torch.isfinite(r)
    cf = torch.isfinite(c)
    bad_nan = int((rf & ~cf).sum())
    # Where the reference is +-inf the candidate must match it; where it is NaN anything goes.
    inf_ref = torch.isinf(r)
    bad_inf = int((inf_ref & (c != r)).sum())
    if bad_nan:
        first = int(torch.nonzero((rf & ~cf).flatten())[0])
        return Comparison(
            name, False, "nan",
            f"output {name!r} ({dt}, shape {tuple(r.shape)}): {bad_nan} / {numel} elements are NaN/Inf "
            f"where the reference is finite (first at index {_fmt_idx(_index(first, tuple(r.shape)))}, "
            f"reference {float(r.flatten()[first]):.6g}, got {float(c.flatten()[first])})",
            details={"nonfinite": bad_nan, "total": numel})
    if bad_inf:
        return Comparison(name, False, "nonfinite",
                          f"output {name!r}: {bad_inf} / {numel} elements differ where the reference is +-inf")
    mask = rf
    rr, cc, bb = r[mask], c[mask], b[mask]
    if rr.numel() == 0:
        return Comparison(name, True, "ok", "")
    err_c, err_b = _relerr(cc, rr), _relerr(bb, rr)
    if rr.numel() > 1 and float(rr.max() - rr.min()) > 0 and float(cc.max() - cc.min()) == 0:
        return Comparison(name, False, "constant-output",
                          f"output {name!r}: every element is {float(cc[0]):.6g}, but the reference is not constant "
                          f"(range {float(rr.min()):.6g} .. {float(rr.max()):.6g})",
                          err_c, err_b)
    diff = (cc - rr).abs()
    scale = float(rr.abs().max())
    if rule.atol is not None and rule.rtol is not None:
        allowed = rule.atol + rule.rtol * rr.abs()
        viol = diff > allowed
        allowed_abs_txt = f"atol {rule.atol:g} + rtol {rule.rtol:g} x |reference|"
        allowed_rel = rule.rtol
        norm_ok = True
        allowed_norm = float("inf")
    else:
        k = rule.baseline_factor
        floor = FLOOR_FACTOR * EPS.get(dt, EPS["float32"])
        delta = floor * scale if scale > 0 else floor
        rel_c = diff / (rr.abs() + delta)
        rel_b = (bb - rr).abs() / (rr.abs() + delta)
        allowed_abs = k * float((bb - rr).abs().max()) + floor * scale
        allowed_rel = k * float(rel_b.max()) + floor
        allowed_norm = k * err_b + floor
        # An element fails when it is both absolutely and relatively beyond what torch's
        # own dtype-precision result gets wrong (near-zero elements are judged absolutely).
        viol = (diff > allowed_abs) & (rel_c > allowed_rel)
        allowed_abs_txt = f"{allowed_abs:.3g}"
        norm_ok = err_c <= allowed_norm
    nviol = int(viol.sum())
    ok = nviol == 0 and norm_ok
    details = {"error": err_c, "baseline_error": err_b, "mismatched": nviol, "total": numel,
               "dtype": dt, "shape": list(r.shape)}
    if ok:
        return Comparison(name, True, "ok", "", err_c, err_b, details)
    full_idx = torch.nonzero(mask.flatten()).flatten()
    imax_abs = int(torch.argmax(diff))
    rel = diff / rr.abs().clamp_min(torch.finfo(torch.float64).tiny)
    imax_rel = int(torch.argmax(rel))
    ia = _index(int(full_idx[imax_abs]), tuple(r.shape))
    ir = _index(int(full_idx[imax_rel]), tuple(r.shape))
    ratio = err_c / err_b if err_b > 0 else float("inf")
    lines = [
        f"Tensor {name!r} ({dt}, shape {tuple(r.shape)}) is not close to the float64 reference!",
        f"Mismatched elements: {nviol} / {numel} ({100.0 * nviol / numel:.1f}%)",
        f"Greatest absolute difference: {float(diff[imax_abs]):.6g} at index {_fmt_idx(ia)} "
        f"(reference {float(rr[imax_abs]):.6g}, got {float(cc[imax_abs]):.6g}; up to {allowed_abs_txt} allowed)",
        f"Greatest relative difference: {float(rel[imax_rel]):.6g} at index {_fmt_idx(ir)} "
        f"(up to {allowed_rel:.3g} allowed)",
    ]
    if rule.atol is None:
        lines.append(f"Normwise relative error: {err_c:.3g}, torch in {dt} gets {err_b:.3g} "
                     f"(ratio {ratio:.3g}; up to {allowed_norm:.3g} allowed = "
                     f"{rule.baseline_factor:g} x baseline + {FLOOR_FACTOR * EPS.get(dt, EPS['float32']):.2g} floor)")
    details.update({"max_abs": float(diff[imax_abs]), "max_abs_index": list(ia), "max_rel": float(rel[imax_rel]),
                    "max_rel_index": list(ir), "ratio": ratio})
    return Comparison(name, False, "mismatch", "\n".join(lines), err_c, err_b, details)


def agree(name: str, a: Any, b: Any, *, bitwise: bool, ref: Any, base: Any, rule: Rule) -> str | None:
    """Two runs of the candidate on the same inputs. None if they agree, else why not."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return f"output {name!r}: two runs on the same inputs returned different shapes or types"
    if bitwise:
        same = torch.equal(a.view(-1).view(torch.uint8) if a.is_contiguous() else a.contiguous().view(torch.uint8),
                           b.view(-1).view(torch.uint8) if b.is_contiguous() else b.contiguous().view(torch.uint8))
        if not same:
            n = int((a != b).sum()) if a.is_floating_point() else -1
            return f"output {name!r}: the spec says deterministic=True but two runs differ bitwise ({n} elements)"
        return None
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    both_nan = torch.isnan(a64) & torch.isnan(b64)
    d = torch.where(both_nan, torch.zeros_like(a64), (a64 - b64).abs())
    d = torch.nan_to_num(d, nan=float("inf"))
    r = ref.detach().to(torch.float64)
    bb = base.detach().to(torch.float64) if base is not None else r
    fin = torch.isfinite(r)
    scale = float(r[fin].abs().max()) if bool(fin.any()) else 1.0
    dt = dtype_name(a)
    tol = rule.baseline_factor * float((bb[fin] - r[fin]).abs().max() if bool(fin.any()) else 0.0) \
        + FLOOR_FACTOR * EPS.get(dt, EPS["float32"]) * scale
    if rule.atol is not None and rule.rtol is not None:
        tol = rule.atol + rule.rtol * scale
    worst = float(d.max()) if d.numel() else 0.0
    if worst > tol:
        return (f"output {name!r}: two runs on the same inputs differ by up to {worst:.6g} "
                f"(more than the {tol:.3g} tolerance): the result depends on something besides the inputs")
    return None
