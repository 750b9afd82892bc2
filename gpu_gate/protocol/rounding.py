"""The rounding envelope: how far a correct kernel computing in its declared precision may
land from the float64 truth on *these* inputs, measured by running the float64 reference
with every operation's rounding put back in (Monte Carlo arithmetic at the level of aten ops).

Inside :class:`RoundingNoise` (a torch dispatch mode, active while the reference runs in
float64, forward and backward):

- an elementwise operation (add, mul, exp, rsqrt, ...) returns its result moved by up to one
  ulp of the kernel's arithmetic (fp32 for fp32/fp16/bf16 data, float64 for float64 data),
  a uniform random fraction per element;
- a reduction over ``n`` terms (sum, mean, mm, bmm, addmm, cumsum, index_add, convolution, ...)
  returns its result moved by ``c x sqrt(n) x u_acc x A``, with a random sign per element:
  ``u_acc`` is the unit roundoff of the declared accumulation dtype (``gg.spec(accumulate=)``,
  float32 by default) and ``A`` is the same operation applied to the absolute values of its
  operands, the sum of the magnitudes of the terms. That is the probabilistic error bound of
  an accumulation in *any* order (Higham and Mary, "A new approach to probabilistic rounding
  error analysis", 2019); a sequential fp32 loop over 2**18 rows meets it, a bf16 one does not;
- a fused operation that hides a reduction (softmax, layer norm, var_mean, nll_loss, their
  backwards, embedding backward) is run through torch's own decomposition into elementary
  operations, so each of its sums gets the rule above;
- everything exact in floating point (views, copies, indexing, max, comparisons, where) is
  left alone: perturbing a max would break the equalities a reference relies on.

With ``u_store`` (the storage envelope, asked for where torch's own low-precision result is
unusable as a yardstick): every elementwise result moves by the data dtype's roundoff, and each
reduction also by ``u_store x A``, the rounding of its terms stored in the data's dtype.

Because ``A`` is the magnitude of the terms, not of the result, a value whose true value is 0
because large terms cancel (a gradient that sums to zero) gets an envelope the size of the
rounding of those terms, instead of the 0 a result-relative floor gives it. And because the
rule is the dtype's, not torch's, a reduction torch happens to compute more accurately (a
tree-reduced fp32 sum, or a CPU fp32 cumsum that accumulates in double) no longer sets the
bar for a correct kernel that accumulates in fp32 in another order.
"""
from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any, TypeGuard, cast

if TYPE_CHECKING:
    import torch
    from torch._ops import OpOverload, OpOverloadPacket
    from torch.utils._python_dispatch import TorchDispatchMode

    # an aten operator, and its overload packet (aten.sum for aten.sum.dim_IntList), as the dispatcher
    # hands them over; an operator known to have returned one tensor
    Op = OpOverload[..., object]
    Packet = OpOverloadPacket[..., object]
    TensorOp = OpOverload[..., torch.Tensor]

ENVELOPE_C = 1.0  # lambda of the probabilistic bound; the comparison's baseline_factor (2) adds margin
# sum, mean, cumsum: lambda over the running-sum model, whose standard deviation is u x walk / sqrt(3)
WALK_LAMBDA = 3.0
REPEAT_TOLERANCE = 2.0**-16  # terms closer than this (relative) count as the same value
MAX_DEPTH = 8  # decompositions that call back into decomposed ops (guard against cycles)

UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8,
                 "float8_e4m3fn": 2.0**-4, "float8_e5m2": 2.0**-3}
ACCUMULATE_DTYPES = ("float64", "float32", "float16", "bfloat16")

# aten op names (overload packets) by rule
_ELEMENTWISE = (
    "add", "sub", "rsub", "mul", "div", "true_divide", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10",
    "sqrt", "rsqrt", "reciprocal", "pow", "tanh", "sigmoid", "erf", "erfc", "erfinv", "sin", "cos", "tan",
    "atan", "atan2", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "addcmul", "addcdiv", "lerp",
    "gelu", "silu", "mish", "softplus", "elu", "selu", "celu", "hypot", "logit", "xlogy", "special_xlog1py",
    "sigmoid_backward", "tanh_backward", "gelu_backward", "silu_backward", "softplus_backward",
    "elu_backward", "mish_backward", "logit_backward",
)
# embedding_dense_backward is a reduction of its own (a scatter-add of the upstream gradient
# into the rows its ids name): on CUDA its decomposition did not put the envelope back (seen
# on an H100), so the op is bounded whole, on every device alike.
_REDUCTIONS = ("sum", "mean", "nansum", "mm", "bmm", "addmm", "addmv", "mv", "dot", "vdot", "baddbmm", "addbmm",
               "cumsum", "index_add", "scatter_add", "_unsafe_masked_index_put_accumulate", "convolution",
               "_convolution", "embedding_dense_backward")
_DECOMPOSE = ("_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
              "native_layer_norm", "native_layer_norm_backward", "var_mean", "var", "std", "std_mean",
              "logsumexp", "native_group_norm", "native_group_norm_backward", "native_batch_norm",
              "native_batch_norm_backward", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
              "_fused_rms_norm", "_fused_rms_norm_backward", "nll_loss_forward", "nll_loss_backward",
              "nll_loss2d_forward", "nll_loss2d_backward", "linalg_vector_norm",
              "norm", "mse_loss", "mse_loss_backward", "l1_loss", "smooth_l1_loss", "smooth_l1_loss_backward",
              "huber_loss", "huber_loss_backward", "binary_cross_entropy", "binary_cross_entropy_backward",
              "binary_cross_entropy_with_logits", "kl_div", "_addmm_activation", "addr", "prod")


def unit_roundoff(dtype: str) -> float:
    return UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["float32"])


def accumulation_dtype(declared: str | None, data: str) -> str:
    """The precision a correct kernel accumulates in: the declared one; undeclared, float32,
    or the data's own where that is wider (float64 data accumulates in float64)."""
    if declared is not None:
        return declared
    wider = unit_roundoff(data) < unit_roundoff("float32") and data in ACCUMULATE_DTYPES
    return data if wider else "float32"


def arithmetic_dtype(data: str) -> str:
    """Elementwise arithmetic of a kernel on ``data``: fp32, or float64 for float64 data."""
    return "float64" if data == "float64" else "float32"


def _names(packets: tuple[str, ...]) -> frozenset[Packet]:
    import torch

    return frozenset(getattr(torch.ops.aten, n) for n in packets if hasattr(torch.ops.aten, n))


def _float_tensor(t: object) -> TypeGuard[torch.Tensor]:
    import torch

    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _abs_args(args: Any) -> Any:
    """Operands in absolute value (numbers too: alpha and beta of addmm)."""
    import torch

    if isinstance(args, (list, tuple)):
        return type(args)(_abs_args(a) for a in args)
    if isinstance(args, dict):
        return {k: _abs_args(v) for k, v in args.items()}
    if isinstance(args, torch.Tensor) and args.is_floating_point():
        return args.abs()
    if isinstance(args, float):
        return abs(args)
    return args


def _terms(packet: Packet, args: tuple[Any, ...], out: torch.Tensor) -> int | torch.Tensor:
    """How many terms each output element sums (an int, or a tensor broadcastable to ``out``)."""
    import torch

    aten = torch.ops.aten
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if packet in (aten.sum, aten.mean, aten.nansum):
        return max(1, tensors[0].numel() // max(out.numel(), 1))
    if packet in (aten.dot, aten.vdot):
        return max(1, tensors[0].numel())
    if packet in (aten.mm, aten.bmm, aten.mv):
        return max(1, tensors[0].shape[-1])
    if packet in (aten.addmm, aten.addmv, aten.baddbmm, aten.addbmm):
        return 1 + max(1, tensors[1].shape[-1])
    if packet in (aten.convolution, aten._convolution):
        w = tensors[1]
        return 1 + max(1, w.numel() // max(w.shape[0], 1))
    if packet is aten.cumsum:
        dim = int(args[1]) % max(out.dim(), 1)
        k = torch.arange(1, out.shape[dim] + 1, dtype=out.dtype, device=out.device) if out.dim() else None
        if k is None:
            return 1
        return k.view([-1 if i == dim else 1 for i in range(out.dim())])
    # index_add / scatter_add / accumulating index_put: at most every source element lands on one target
    return 1 + max(1, max((t.numel() for t in tensors[1:]), default=1))


class RoundingNoise:
    """A dispatch mode that puts rounding back into a float64 computation (see module doc).
    ``u_elem``: unit roundoff of the kernel's elementwise arithmetic; ``u_acc``: of its
    accumulations. Deterministic given ``seed``."""

    def __init__(self, u_elem: float, u_acc: float, seed: int, device: torch.device | str, u_store: float = 0.0
                 ) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        import torch

        outer = self

        class _Mode(TorchDispatchMode):  # type: ignore[no-untyped-call]
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # torch wraps a mode's handler in a lazy import of Dynamo (sympy and some 900 modules, two
                # seconds of CPU in every reference worker), so that torch.compile does not trace into
                # it. A reference that has not loaded Dynamo runs eagerly: there is nothing to skip.
                return "torch._dynamo" in sys.modules and bool(super()._should_skip_dynamo())

            def __torch_dispatch__(self, func: Op, types: object, args: tuple[Any, ...] = (),
                                   kwargs: dict[str, Any] | None = None) -> object:
                return outer.dispatch(self, func, args, kwargs or {})

        self.u_elem, self.u_acc, self.u_store = u_elem, u_acc, u_store
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        self.mode = _Mode()  # type: ignore[no-untyped-call]
        self.depth = 0
        self.elementwise = _names(_ELEMENTWISE)
        self.reductions = _names(_REDUCTIONS)
        self.decompose = _names(_DECOMPOSE)

    def __enter__(self) -> RoundingNoise:
        self.mode.__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: object) -> None:
        self.mode.__exit__(*exc)  # type: ignore[no-untyped-call]

    def dispatch(self, mode: TorchDispatchMode, func: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
        from torch._decomp import decomposition_table

        packet = func.overloadpacket
        if packet in self.decompose and func in decomposition_table and self.depth < MAX_DEPTH:
            self.depth += 1
            try:
                with mode:  # the decomposition's own ops come back through this mode
                    return decomposition_table[func](*args, **kwargs)
            finally:
                self.depth -= 1
        out = func(*args, **kwargs)
        if not _float_tensor(out) or func._schema.is_mutable or not out.numel():
            return out
        if packet in self.elementwise:
            return out * (1 + self.u_elem * self._uniform(out))
        if packet in self.reductions:
            return out + self._envelope(cast("TensorOp", func), packet, args, kwargs, out)  # it returned one (above)
        return out

    def _uniform(self, like: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.rand(like.shape, generator=self.gen, dtype=like.dtype, device=like.device) * 4 - 2

    def _envelope(self, func: TensorOp, packet: Packet, args: tuple[Any, ...], kwargs: dict[str, Any],
                  out: torch.Tensor) -> torch.Tensor:
        import torch

        walk = _walk(packet, args, kwargs, out)
        counts = _scatter_counts(packet, args, out) if walk is None else None
        if walk is not None:
            env = WALK_LAMBDA * self.u_acc * walk
        elif counts is not None:
            # A scatter-add in any order (fp32 atomics): a hot row's terms are added one after
            # another in an order nobody chose, so its rounding is bounded by the count of
            # terms it received times their magnitude (Higham's deterministic bound), not by
            # the random walk: seen on an H100, where Zipf-hot rows of an atomic embedding
            # gradient landed several times past the sqrt(n) bound.
            magnitude = func(*_abs_args(args), **_abs_args(kwargs)).abs()
            env = self.u_acc * counts * magnitude
        else:
            magnitude = func(*_abs_args(args), **_abs_args(kwargs)).abs()
            n = _terms(packet, args, out)
            root = n.sqrt() if isinstance(n, torch.Tensor) else math.sqrt(n)
            env = ENVELOPE_C * self.u_acc * root * magnitude
        if self.u_store:
            env = env + self._stored(func, args, kwargs)
        sign = torch.randint(0, 2, out.shape, generator=self.gen, device=out.device).to(out.dtype) * 2 - 1
        return torch.where(torch.isfinite(env), env * sign, torch.zeros_like(env))


    def _stored(self, func: TensorOp, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        """The rounding of a reduction's terms stored in the data's dtype before they are summed
        (``u_store``): each term moves by up to ``u_store`` of itself, and the moves need not be
        independent (bfloat16 values minus a small constant all round back up, by the same amount),
        so the sum moves by up to ``u_store`` times the sum of the terms' magnitudes (Higham's
        deterministic bound). It scales with the terms, not the result: where they cancel (a
        gradient whose true value is 0), a kernel that stores them as torch's own low-precision
        computation does lands about this far."""
        return self.u_store * func(*_abs_args(args), **_abs_args(kwargs)).abs()


def _scatter_counts(packet: Packet, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor | None:
    """For an embedding gradient or an ``index_add``: how many terms each output row received,
    shaped to broadcast against ``out``. None for other operations."""
    import torch

    aten = torch.ops.aten
    if packet is aten.embedding_dense_backward and len(args) >= 3 and isinstance(args[1], torch.Tensor):
        rows, dim = int(args[2]), 0
        index = args[1].reshape(-1)
    elif packet is aten.index_add and len(args) >= 3 and isinstance(args[2], torch.Tensor) and out.dim():
        dim = int(args[1]) % out.dim()
        rows, index = out.shape[dim], args[2].reshape(-1)
    else:
        return None
    valid = index[(index >= 0) & (index < rows)].long()
    counts = torch.bincount(valid, minlength=rows)[:rows].to(out.dtype)
    return counts.view([-1 if i == dim else 1 for i in range(out.dim())])


def _walk(packet: Packet, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor) -> torch.Tensor | None:
    """For a sum, mean or cumsum of one tensor: ``sqrt(sum_k S_k**2)`` over the partial sums
    ``S_k`` of the reduced terms in index order, the size of the rounding a running
    accumulation makes (each step rounds ``S_k`` by up to ``u``). None for other reductions.

    The data is drawn independently along the reduction, so any order that does not look at
    the values (sequential, blocked, a tree) has partial sums of this size or smaller."""
    import torch

    aten = torch.ops.aten
    x = args[0]
    if packet not in (aten.sum, aten.mean, aten.nansum, aten.cumsum) or not isinstance(x, torch.Tensor) \
            or x.dim() == 0:
        return None
    if packet is aten.cumsum:
        dims = [int(args[1]) % x.dim()]
    else:
        given = args[1] if len(args) > 1 else kwargs.get("dim")
        dims = sorted({int(d) % x.dim() for d in (given or range(x.dim()))})
    rest = [d for d in range(x.dim()) if d not in dims]
    terms = x.permute(*rest, *dims).reshape(*[x.shape[d] for d in rest], -1)
    if packet is aten.nansum:
        terms = torch.nan_to_num(terms, nan=0.0)
    partial = terms.cumsum(-1)
    if packet is aten.cumsum:  # each prefix is its own sum
        random_walk = partial.pow(2).cumsum(-1).sqrt()
        worst = partial.abs().cumsum(-1)
    else:
        random_walk = partial.pow(2).sum(-1).sqrt()
        worst = partial.abs().sum(-1)
    # Roundings are independent only where the terms vary: adding the same value again and
    # again (an expanded input, a constant) rounds the same way each time, and the errors add
    # up to the deterministic bound u x sum|S_k| (Higham, Accuracy and Stability, 4.2).
    repeats = _mostly_repeated(terms)
    if packet is aten.cumsum:
        repeats = repeats.unsqueeze(-1)
    walk = torch.where(repeats, worst / WALK_LAMBDA, random_walk)
    if packet is aten.mean:
        walk = walk / max(terms.shape[-1], 1)
    if packet is aten.cumsum:
        return walk.reshape(*[x.shape[d] for d in rest], x.shape[dims[0]]).movedim(-1, dims[0])
    return walk.reshape(out.shape)


def _mostly_repeated(terms: torch.Tensor) -> torch.Tensor:
    """Per output: whether at most half of its terms are distinct values. Values within a
    relative 2**-16 of each other count as one: the envelope's own perturbations (a few fp32
    ulps) must not make repeated terms look distinct."""
    import torch

    n = terms.shape[-1]
    if n < 2:
        return torch.zeros(terms.shape[:-1], dtype=torch.bool, device=terms.device)
    ordered = terms.sort(-1).values
    lo, hi = ordered[..., :-1], ordered[..., 1:]
    distinct = ((hi - lo) > REPEAT_TOLERANCE * torch.maximum(lo.abs(), hi.abs())).sum(-1) + 1
    return distinct * 2 <= n
