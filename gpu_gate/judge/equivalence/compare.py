"""Comparison against the float64 reference, relative to the baseline's error.

Rule (after the FlashAttention test suite): the candidate's error may be at most
``k x`` the baseline's error plus a dtype floor, where the baseline is the same
reference computed by torch in the kernel's own dtype. Two measures are judged,
each against its baseline twin:

- normwise: ``||cand - ref|| / ||ref||  <=  k x ||base - ref|| / ||ref|| + floor``;
- worst element: an element fails when its absolute error exceeds
  ``k x max|base - ref| + floor x max|ref|`` *and* its relative error, taken against
  ``|ref| + floor x max|ref|`` (so near-zero elements are judged absolutely), exceeds
  ``k x`` the baseline's worst relative error ``+ floor``.

A bug confined to a few elements (a rounding in one class of a softmax) hides in the
norm; the worst element shows it. Elements where torch's own result overflows the
dtype are out of the dtype's range and not judged. NaN/Inf where the reference and
the baseline are finite always fails, and so does an output that is constant where
neither the reference nor the baseline is. All mismatches are collected before the
message is written, phrased like ``torch.testing.assert_close``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Machine epsilon per dtype; floors are small multiples of it. One table, keyed by dtype.
EPS = {"float64": 2.2e-16, "float32": 1.19e-7, "float16": 9.77e-4, "bfloat16": 7.81e-3,
       "float8_e4m3fn": 0.125, "float8_e5m2": 0.25}
FLOOR_FACTOR = 1.0  # the floor is one machine epsilon: two units of rounding


UNUSABLE_FACTOR = 16.0  # torch's own error beyond 16 epsilons: its low-precision path broke down


WITNESS_FACTOR = 16.0  # torch's own low-precision deviation still counts within 16x the storage envelope's draw


def storage_witness(ref: Any, low: object, stored: object) -> object:
    """The storage envelope's perturbed reference, with torch's own low-precision result put in where it
    is the larger deviation and still of the size of the rounding of stored intermediates (at most
    :data:`WITNESS_FACTOR` times the envelope's draw there).

    The envelope draws each elementwise rounding with a sign of its own, so the rounding of equal values
    (thousands of ties, an expanded gradient), which all round the same way, is drawn as a random walk
    where it adds up: seen on a zero gradient of 4096 tied bfloat16 logits, where torch's own bfloat16
    result was off by 1.75, a correct kernel by 1.55, and the envelope's draw allowed 0.42. There torch's
    own result is a witness of what the dtype does. Where torch lost the answer (an overflow inside its
    low-precision path: x * x in float16), its deviation is the size of the result, hundreds of times the
    rounding of the terms, and it is left out."""
    import torch

    if not (isinstance(low, torch.Tensor) and isinstance(stored, torch.Tensor) and low.shape == ref.shape == stored.shape):
        return stored
    r = ref.detach().to(torch.float64)
    lo = low.detach().to(torch.float64)
    st = stored.detach().to(torch.float64)
    d_low, d_st = (lo - r).abs(), (st - r).abs()
    use = torch.isfinite(lo) & torch.isfinite(r) & (d_low > d_st) & (d_low <= WITNESS_FACTOR * d_st)
    return torch.where(use, lo, st)


def baseline_unusable(c: Comparison) -> bool:
    """torch's result in the kernel's dtype lost the answer (an overflow inside, say x**2 in
    float16), so it cannot be the yardstick; the caller then compares against torch in
    float32 rounded to the dtype instead."""
    dt = str(c.details.get("dtype", ""))
    return dt in EPS and float(c.details.get("torch_error", 0.0)) > UNUSABLE_FACTOR * EPS[dt]


def floor_for(dtype: str) -> float:
    """The dtype floor: integer and boolean outputs must be exact (up to torch's own error)."""
    if dtype in EPS:
        return FLOOR_FACTOR * EPS[dtype]
    return 0.0 if dtype.startswith(("int", "uint", "bool")) else FLOOR_FACTOR * EPS["float32"]


@dataclasses.dataclass(frozen=True)
class Rule:
    baseline_factor: float = 2.0
    atol: float | None = None
    rtol: float | None = None

    @property
    def fixed(self) -> bool:
        return self.atol is not None and self.rtol is not None

    def describe(self) -> str:
        if self.fixed:
            return f"|cand - ref| <= {self.atol:g} + {self.rtol:g} x |ref| elementwise"
        return f"error <= {self.baseline_factor:g} x torch's error in the kernel's dtype + dtype floor"


@dataclasses.dataclass
class Comparison:
    name: str
    ok: bool
    kind: str  # "ok" | "mismatch" | "nan" | "shape" | "dtype" | "type" | "constant-output" | "nonfinite"
    message: str
    error: float = 0.0  # normwise relative error of the candidate
    baseline_error: float = 0.0
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _index(flat_idx: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for n in reversed(shape):
        out.append(flat_idx % max(n, 1))
        flat_idx //= max(n, 1)
    return tuple(reversed(out))


def _fmt_idx(idx: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(i) for i in idx) + ("," if len(idx) == 1 else "") + ")"


def _structural(name: str, cand: object, ref: torch.Tensor, base: object) -> Comparison | None:
    import torch

    if not isinstance(cand, torch.Tensor):
        return Comparison(name, False, "type", f"output {name!r}: expected a tensor, got {type(cand).__name__}")
    if tuple(cand.shape) != tuple(ref.shape):
        return Comparison(name, False, "shape",
                          f"output {name!r}: shape {tuple(cand.shape)} but the reference has {tuple(ref.shape)}")
    if isinstance(base, torch.Tensor) and cand.dtype != base.dtype:
        wider = (cand.is_floating_point() and base.is_floating_point()
                 and torch.finfo(cand.dtype).bits > torch.finfo(base.dtype).bits)
        return Comparison(name, False, "dtype",
                          f"output {name!r}: dtype {dtype_name(cand)} but torch gives {dtype_name(base)} "
                          f"for the same inputs" + (
                              f"; if the wider {dtype_name(cand)} is the kernel's contract (a float32 loss from "
                              f"bfloat16 logits, as Hugging Face's loss upcasts), say so in the spec: a reference "
                              f"that returns it (gg.upcast)" if wider else ""))
    return None


def _stats(c: torch.Tensor, r: torch.Tensor, b: torch.Tensor,
           p: torch.Tensor | None) -> tuple[Any, dict[str, float]]:
    """Masks and every scalar the rule needs, fetched from the device in one transfer.
    The baseline error per element is the larger of torch's own error in the kernel's dtype
    and the reference's shift under a rounding-sized perturbation of the inputs (``p``)."""
    import torch

    # Sums of the three tensors are finite exactly when every element is (overflow to inf
    # aside, which only sends us down the exact path): one cheap check for the common case.
    checks = [c.sum(), r.sum(), b.sum()] + ([p.sum()] if p is not None else [])
    if all(math.isfinite(v) for v in torch.stack(checks).tolist()):
        return _stats_finite(c, r, b, p)
    rf, bf, cf = torch.isfinite(r), torch.isfinite(b), torch.isfinite(c)
    judged = rf & bf
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    d = torch.where(judged & cf, (c - r).abs(), zero)
    db = torch.where(judged, (b - r).abs(), zero)
    norm_torch = torch.linalg.vector_norm(db)
    if p is not None:
        db = torch.maximum(db, torch.where(judged & torch.isfinite(p), (p - r).abs(), zero))
    ra = torch.where(judged, r.abs(), zero)
    inf_wrong = torch.isinf(r) & (b == r) & (c != r)
    big = torch.finfo(torch.float64).max
    vals = torch.stack([
        ra.max(), torch.linalg.vector_norm(d), torch.linalg.vector_norm(db), torch.linalg.vector_norm(ra),
        db.max(), (judged & ~cf).sum().to(torch.float64), inf_wrong.sum().to(torch.float64),
        (rf & ~bf).sum().to(torch.float64), judged.sum().to(torch.float64),
        torch.where(judged, c, zero + big).min(), torch.where(judged, c, zero - big).max(),
        torch.where(judged, r, zero + big).min(), torch.where(judged, r, zero - big).max(),
        torch.where(judged, b, zero + big).min(), torch.where(judged, b, zero - big).max(), norm_torch,
    ]).tolist()
    keys = ("scale", "norm_d", "norm_db", "norm_r", "max_db", "bad_nan", "bad_inf", "out_of_range", "judged",
            "cmin", "cmax", "rmin", "rmax", "bmin", "bmax", "norm_torch")
    return (judged, cf, d, db, ra), dict(zip(keys, vals))


def _stats_finite(c: torch.Tensor, r: torch.Tensor, b: torch.Tensor,
                  p: torch.Tensor | None) -> tuple[Any, dict[str, float]]:
    """``_stats`` when every element of every tensor is finite: no masks needed."""
    import torch

    d = (c - r).abs()
    db = (b - r).abs()
    norm_torch = torch.linalg.vector_norm(db)
    if p is not None:
        db = torch.maximum(db, (p - r).abs())
    ra = r.abs()
    cmin, cmax = torch.aminmax(c)
    rmin, rmax = torch.aminmax(r)
    bmin, bmax = torch.aminmax(b)
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    vals = torch.stack([ra.max(), torch.linalg.vector_norm(d), torch.linalg.vector_norm(db),
                        torch.linalg.vector_norm(ra), db.max(), zero, zero, zero, zero + r.numel(),
                        cmin, cmax, rmin, rmax, bmin, bmax, norm_torch]).tolist()
    keys = ("scale", "norm_d", "norm_db", "norm_r", "max_db", "bad_nan", "bad_inf", "out_of_range", "judged",
            "cmin", "cmax", "rmin", "rmax", "bmin", "bmax", "norm_torch")
    return (None, None, d, db, ra), dict(zip(keys, vals))


def compare(name: str, cand: Any, ref: Any, base: object, rule: Rule, *, perturbed: object = None) -> Comparison:
    """``ref`` is float64; ``base`` is torch's result in the kernel's dtype (may be None);
    ``perturbed`` is the float64 reference on rounding-perturbed inputs (may be None)."""
    import torch

    bad = _structural(name, cand, ref, base)
    if bad is not None:
        return bad
    dt = dtype_name(cand)
    shape = tuple(ref.shape)
    numel = ref.numel()
    if numel == 0:
        return Comparison(name, True, "ok", "")
    c = cand.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    b = base.detach().to(torch.float64) if isinstance(base, torch.Tensor) else r
    p = perturbed.detach().to(torch.float64) if isinstance(perturbed, torch.Tensor) and \
        perturbed.shape == ref.shape else None
    (judged, cf, d, db, ra), s = _stats(c, r, b, p)
    head = f"output {name!r} ({dt}, shape {shape})"
    if s["bad_nan"]:
        first = int(torch.nonzero((judged & ~cf).flatten())[0])
        return Comparison(
            name, False, "nan",
            f"{head}: {int(s['bad_nan'])} / {numel} elements are NaN/Inf where the reference is finite "
            f"(first at index {_fmt_idx(_index(first, shape))}: reference {float(r.flatten()[first]):.6g}, "
            f"got {float(c.flatten()[first])})",
            details={"nonfinite": int(s["bad_nan"]), "total": numel, "dtype": dt})
    if s["bad_inf"]:
        return Comparison(name, False, "nonfinite",
                          f"{head}: {int(s['bad_inf'])} / {numel} elements differ where the reference (and torch "
                          f"in {dt}) is +-inf")
    if s["judged"] == 0:
        return Comparison(name, True, "ok", "", details={"out_of_range": int(s["out_of_range"])})
    norm_r = s["norm_r"]
    err_c = s["norm_d"] / norm_r if norm_r > 0 else s["norm_d"]
    err_b = s["norm_db"] / norm_r if norm_r > 0 else s["norm_db"]
    details: dict[str, object] = {"error": err_c, "baseline_error": err_b, "total": numel, "dtype": dt,
                               "shape": list(shape),
                               "torch_error": s["norm_torch"] / norm_r if norm_r > 0 else s["norm_torch"]}
    if s["out_of_range"]:
        details["out_of_range"] = int(s["out_of_range"])
    scale = s["scale"]
    floor = floor_for(dt)
    delta = floor * scale if scale > 0 else floor
    rel_c = d / (ra + delta)
    if rule.fixed:
        assert rule.atol is not None and rule.rtol is not None
        allowed_abs, allowed_rel, allowed_norm = rule.atol, rule.rtol, float("inf")
        viol = d > rule.atol + rule.rtol * ra
        spread_allowed = rule.atol + rule.rtol * scale
    else:
        k = rule.baseline_factor
        rel_b_max = float((db / (ra + delta)).max())
        allowed_abs = k * s["max_db"] + (floor * scale if scale > 0 else floor)
        allowed_rel = k * rel_b_max + floor
        allowed_norm = k * err_b + floor
        viol = (d > allowed_abs) & (rel_c > allowed_rel)
        spread_allowed = allowed_abs
    constant = _constant(name, head, s, err_c, err_b, details, spread_allowed)
    if constant is not None:
        return constant
    nviol = int(viol.sum())
    norm_ok = err_c <= allowed_norm
    details["mismatched"] = nviol
    if nviol == 0 and norm_ok:
        return Comparison(name, True, "ok", "", err_c, err_b, details)
    imax_abs, imax_rel = int(torch.argmax(d)), int(torch.argmax(rel_c))
    ia, ir = _index(imax_abs, shape), _index(imax_rel, shape)
    flat_r, flat_c = r.flatten(), c.flatten()
    ratio = err_c / err_b if err_b > 0 else float("inf")
    measures = ([] if norm_ok else ["normwise"]) + (["worst element"] if nviol else [])
    allowed_abs_txt = (f"atol {rule.atol:g} + rtol {rule.rtol:g} x |reference|" if rule.fixed
                       else f"{allowed_abs:.3g}")
    lines = [
        f"Tensor {name!r} ({dt}, shape {shape}) is not close to the float64 reference "
        f"(failed: {', '.join(measures)})!",
        f"Mismatched elements: {nviol} / {numel} ({100.0 * nviol / numel:.1f}%)",
        f"Greatest absolute difference: {float(d.flatten()[imax_abs]):.6g} at index {_fmt_idx(ia)} "
        f"(reference {float(flat_r[imax_abs]):.6g}, got {float(flat_c[imax_abs]):.6g}; up to {allowed_abs_txt} "
        f"allowed)",
        f"Greatest relative difference: {float(rel_c.flatten()[imax_rel]):.6g} at index {_fmt_idx(ir)} "
        f"(reference {float(flat_r[imax_rel]):.6g}, got {float(flat_c[imax_rel]):.6g}; up to {allowed_rel:.3g} "
        f"allowed)",
    ]
    if not rule.fixed:
        lines.append(f"Normwise relative error: {err_c:.3g}, baseline (torch in {dt}, or the rounding envelope if larger) "
                     f"gets {err_b:.3g} (ratio {ratio:.3g}; up to {allowed_norm:.3g} allowed = "
                     f"{rule.baseline_factor:g} x baseline + {floor:.2g} floor)")
    details.update({"max_abs": float(d.flatten()[imax_abs]), "max_abs_index": list(ia),
                    "max_rel": float(rel_c.flatten()[imax_rel]), "max_rel_index": list(ir), "ratio": ratio,
                    "measures": measures})
    return Comparison(name, False, "mismatch", "\n".join(lines), err_c, err_b, details)


def _constant(name: str, head: str, s: dict[str, float], err_c: float, err_b: float,
              details: dict[str, object], spread_allowed: float) -> Comparison | None:
    """A constant (or all-zero) output where the reference varies by more than the tolerance
    and torch's own dtype-precision result is not constant either: the kernel did not compute
    anything. (A spread within the tolerance is rounding, and a constant is then legitimate.)"""
    if s["judged"] < 2 or s["cmax"] != s["cmin"]:
        return None
    if s["rmax"] - s["rmin"] <= spread_allowed or s["bmax"] == s["bmin"]:
        return None
    what = "zero" if s["cmax"] == 0 else f"{s['cmax']:.6g}"
    return Comparison(name, False, "constant-output",
                      f"{head}: every element is {what}, but the reference is not constant "
                      f"(range {s['rmin']:.6g} .. {s['rmax']:.6g})", err_c, err_b, details)


def agreement_tolerance(ref: torch.Tensor, base: object, dt: str, rule: Rule, perturbed: object = None) -> float:
    """How far two runs of the candidate on the same inputs may differ. Each run may be off the
    reference by the comparison's own tolerance, in either direction, so two runs may differ by
    twice that (fp32 atomics, and sums whose order depends on which program takes a lock first,
    legitimately land anywhere in that band). The baseline's error is torch's, or the rounding
    envelope's (``perturbed``, see gpu_gate.protocol.rounding) where that is larger."""
    import torch

    r = ref.detach().to(torch.float64)
    b = base.detach().to(torch.float64) if isinstance(base, torch.Tensor) and base.shape == ref.shape else r
    fin = torch.isfinite(r) & torch.isfinite(b)
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    db = torch.where(fin, (b - r).abs(), zero)
    if isinstance(perturbed, torch.Tensor) and perturbed.shape == ref.shape:
        p = perturbed.detach().to(torch.float64)
        db = torch.maximum(db, torch.where(fin & torch.isfinite(p), (p - r).abs(), zero))
    scale, max_db = torch.stack([torch.where(fin, r.abs(), zero).max() if r.numel() else zero,
                                 db.max() if r.numel() else zero]).tolist()
    if rule.fixed:
        assert rule.atol is not None and rule.rtol is not None
        return 2.0 * float(rule.atol + rule.rtol * scale)
    floor = floor_for(dt)
    return 2.0 * float(rule.baseline_factor * max_db + floor * (scale if scale > 0 else 1.0))


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t``'s elements in order. A copy with fresh strides: ``contiguous()``
    keeps the stride of a size-1 dim (a single element with stride 2 counts as contiguous),
    and viewing that as bytes raises."""
    import torch

    return t.detach().reshape(-1).clone(memory_format=torch.contiguous_format).view(torch.uint8)


def run_spread(a: object, b: object) -> float | None:
    """How far two runs' values of one output are apart: the largest elementwise difference (equal
    non-finite values count as equal); None where it is not a finite number of two comparable tensors."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape \
            or not a.is_floating_point() or not b.is_floating_point() or a.numel() == 0:
        return None
    worst = _apart(a, b)
    return worst if math.isfinite(worst) else None


def _apart(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest elementwise difference of two tensors of one shape, in float64: equal values
    (equal infinities, NaN against NaN) count 0, a NaN against a number counts infinite."""
    import torch

    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
    d = torch.where(same, torch.zeros_like(a64), (a64 - b64).abs())
    return float(torch.nan_to_num(d, nan=float("inf")).max())


def agree(name: str, a: object, b: object, *, bitwise: bool, ref: torch.Tensor, base: object, rule: Rule,
          perturbed: object = None) -> str | None:
    """Two runs of the candidate on the same inputs. None if they agree, else why not."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape \
            or a.dtype != b.dtype:
        return f"output {name!r}: two runs on the same inputs returned different shapes, dtypes or types"
    if a.numel() == 0:
        return None
    if bitwise:
        if not torch.equal(as_bytes(a), as_bytes(b)):
            n = int((a != b).sum()) if a.is_floating_point() else -1
            return (f"output {name!r}: the spec says deterministic=True but two runs on the same inputs differ "
                    f"bitwise ({n} elements)")
        return None
    if torch.equal(a, b):
        return None
    worst = _apart(a, b)
    tol = agreement_tolerance(ref, base, dtype_name(a), rule, perturbed)
    if worst > tol:
        return (f"output {name!r}: two runs on the same inputs differ by up to {worst:.6g} "
                f"(more than the {tol:.3g} tolerance): the result depends on something besides the inputs")
    return None
