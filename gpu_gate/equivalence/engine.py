"""Run one case: candidate, reference (float64), baseline (torch in the kernel's dtype),
candidate again; then every anti-exploit guard. Returns findings; never prints.

The order matters. The candidate runs before the reference, so it cannot hand back a
buffer that the reference just freed; the reference and baseline results stay alive
while the candidate runs a second time, and both candidate runs must agree.
"""
from __future__ import annotations

import dataclasses
import traceback
from typing import Any

from ..findings import Finding, Severity
from ..spec import Spec
from .cases import Case
from .compare import Comparison, Rule, agree, as_bytes, baseline_unusable, compare
from .guard import OutputWatch, SideStreams
from .inputs import Materialized, materialize, perturbed_inputs, reference_inputs
from .rounding import RoundingNoise, accumulation_dtype, arithmetic_dtype, unit_roundoff

FATAL_MARKERS = ("CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure",
                 "misaligned address", "CUDA_ERROR_", "an illegal instruction")


class ContextLost(Exception):
    """The CUDA context is unusable: the rest of this job cannot run in this process."""


class SpecBroken(Exception):
    """The spec itself (its reference) is wrong; not the kernel's fault."""


@dataclasses.dataclass
class CaseResult:
    case: Case
    findings: list[Finding]
    comparisons: list[Comparison] = dataclasses.field(default_factory=list)
    refused: str | None = None
    unsupported: str | None = None  # the Triton interpreter could not run the kernel (not the kernel's refusal)
    trace: str | None = None  # the traceback that says where

    @property
    def failed(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.findings)


def normalize(out: Any) -> dict[str, Any]:
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return {f"out{i}": v for i, v in enumerate(out)}
    return {"out": out}


def is_fatal(exc: BaseException) -> bool:
    return any(m in str(exc) for m in FATAL_MARKERS)


def sync(device: str) -> None:
    """Wait for every stream on the device: a result finished on a side stream is read only
    after this (and is caught by the unordered-stream guard if it was not ordered)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def upstream_values(outs: dict[str, Any], seed: int) -> dict[str, Any]:
    """A random upstream gradient per output, in float64: never all ones."""
    import torch

    grads: dict[str, Any] = {}
    for k, o in outs.items():
        if not isinstance(o, torch.Tensor) or not o.is_floating_point():
            continue
        gen = torch.Generator(device=o.device)
        gen.manual_seed(seed * 17 + 5 + len(grads))
        grads[k] = torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float64)
    return grads


def expanded_values(grads: dict[str, Any]) -> dict[str, Any]:
    """Upstream values equal along the first dim, for an ``expanded`` gradient: the reference
    gets the same values, contiguous."""
    return {k: (v[:1].expand(v.shape).clone() if v.dim() >= 1 and v.shape[0] > 1 else v) for k, v in grads.items()}


def grad_tensor(values: Any, dtype: Any, layout: str) -> Any:
    """The upstream gradient in ``dtype``; ``strided``: transposed in memory (rank >= 2)
    or every other element of a wider buffer (rank 1); ``expanded``: one row with a stride
    of 0 along the first dim (the values are equal along it, see :func:`expanded_values`)."""
    import torch

    g = values.to(dtype)
    if layout == "contiguous" or g.dim() == 0:
        return g
    if layout == "expanded":
        return g[:1].expand(g.shape) if g.shape[0] > 1 else g
    if g.dim() >= 2:
        return g.transpose(-1, -2).contiguous().transpose(-1, -2)
    wide = torch.empty((g.shape[0] * 2,), dtype=dtype, device=g.device)
    wide[::2] = g
    return wide[::2]


def call_with_grads(spec: Spec, fn: Any, inputs: dict[str, Any], kwargs: dict[str, Any],
                    upstream: dict[str, Any] | None, grad_layout: str = "contiguous") -> dict[str, Any]:
    import torch

    if not spec.grads:
        return normalize(fn(**inputs, **kwargs))
    leaves = {}
    for g in spec.grads:
        leaves[g] = inputs[g].detach().requires_grad_(True)
        inputs = {**inputs, g: leaves[g]}
    outs = normalize(fn(**inputs, **kwargs))
    upstream = upstream or {}
    diff = {k: v for k, v in outs.items() if isinstance(v, torch.Tensor) and v.requires_grad and k in upstream}
    if diff:
        gos = [grad_tensor(upstream[k], v.dtype, grad_layout) for k, v in diff.items()]
        grads = torch.autograd.grad(list(diff.values()), list(leaves.values()), gos, allow_unused=True)
        for name, gr in zip(leaves, grads):
            outs[f"grad:{name}"] = gr
    return {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in outs.items()}


def _finding(spec_id: str, case: Case, kind: str, message: str, repro: str, severity: Severity = Severity.ERROR,
             **details: Any) -> Finding:
    return Finding(check="equivalence", kind=kind, message=message, severity=severity, spec=spec_id, case=case.id,
                   repro=repro, details={"case": case.describe(), "token": case.token(), **details})


def interpreter_error(exc: BaseException) -> BaseException | None:
    """The error of Triton's interpreter in ``exc``'s chain, if any: the interpreter wraps
    whatever stopped it inside a kernel (libdevice calls, inline asm, an op it does not
    implement) in an ``InterpreterError``. That says the kernel could not run *here*; it is
    not the kernel refusing an input."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if type(cur).__name__ == "InterpreterError" and type(cur).__module__.startswith("triton"):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


class CaseRunner:
    def __init__(self, spec: Spec, spec_id: str, device: str, rule: Rule, repro_cmd: str) -> None:
        self.spec = spec
        self.spec_id = spec_id
        self.device = device
        self.rule = rule
        self.repro_cmd = repro_cmd  # with {token}
        self.side_streams: set[int] = set()  # streams the last candidate call switched to

    # --- the three computations -------------------------------------------------

    def kwargs(self, case: Case) -> dict[str, Any]:
        return {**self.spec.params, **{d: case.dims[d] for d in self.spec.dim_args}}

    def call(self, m: Materialized, upstream: dict[str, Any] | None) -> tuple[dict[str, Any], OutputWatch]:
        with OutputWatch() as watch, SideStreams(self.device) as streams:
            self.side_streams = streams.used
            outs = call_with_grads(self.spec, self.spec.fn, dict(m.tensors), self.kwargs(m.case), upstream,
                                   m.case.grad_layout)
        return outs, watch

    def reference(self, m: Materialized, upstream: dict[str, Any] | None, *, upcast: bool = True) -> dict[str, Any]:
        import torch

        inputs = reference_inputs(self.spec, m, upcast=upcast)
        if self.spec.grads:
            return call_with_grads(self.spec, self.spec.reference, inputs, self.kwargs(m.case), upstream)
        with torch.no_grad():
            return normalize(self.spec.reference(**inputs, **self.kwargs(m.case)))

    def conditioning(self, m: Materialized, upstream: dict[str, Any] | None) -> dict[str, Any]:
        """The float64 reference on inputs moved by up to one ulp of the kernel's arithmetic,
        with the rounding of every operation put back in (see :mod:`.rounding`): how far a
        correct kernel computing in that precision, accumulating in the spec's declared dtype
        in any order, may land from the truth on *these* inputs. An ill-conditioned case (a
        large mean in a layer norm) or terms that cancel (a gradient that is exactly 0) widen it."""
        import torch

        inputs = perturbed_inputs(self.spec, m, m.case.seed)
        # The dispatch mode is thread-local, and on a GPU autograd runs backward on a device
        # thread of its own: keep backward on this thread, inside the mode.
        with self.rounding(m), torch.autograd.set_multithreading_enabled(False):
            if self.spec.grads:
                return call_with_grads(self.spec, self.spec.reference, inputs, self.kwargs(m.case), upstream)
            with torch.no_grad():
                return normalize(self.spec.reference(**inputs, **self.kwargs(m.case)))

    def rounding(self, m: Materialized) -> RoundingNoise:
        data = m.case.dtype
        acc = accumulation_dtype(self.spec.accumulate, data)
        device = next(iter(m.tensors.values())).device if m.tensors else self.device
        return RoundingNoise(unit_roundoff(arithmetic_dtype(data)), unit_roundoff(acc), m.case.seed * 29 + 3, device)

    def baseline(self, m: Materialized, upstream: dict[str, Any] | None, like: dict[str, Any]) -> dict[str, Any]:
        """torch in the kernel's dtype; where torch has no kernel for that dtype on this device,
        the float32 result rounded to it (the best the dtype can represent)."""
        try:
            return self.reference(m, upstream, upcast=False)
        except (RuntimeError, NotImplementedError, TypeError):
            return self.baseline_fp32(m, upstream, like)

    def baseline_fp32(self, m: Materialized, upstream: dict[str, Any] | None, like: dict[str, Any]
                      ) -> dict[str, Any]:
        """The reference computed in (at least) float32 on the dtype's inputs, rounded to each
        output's dtype: the best the dtype can represent with fp32 arithmetic."""
        import torch

        from ..spec import upcast

        inputs = {k: upcast(v.detach()) for k, v in reference_inputs(self.spec, m, upcast=False).items()}
        kw = self.kwargs(m.case)
        if self.spec.grads:
            outs = call_with_grads(self.spec, self.spec.reference, inputs, kw, upstream)
        else:
            with torch.no_grad():
                outs = normalize(self.spec.reference(**inputs, **kw))
        return {k: (v.to(like[k].dtype) if isinstance(like.get(k), torch.Tensor) and isinstance(v, torch.Tensor)
                    else v) for k, v in outs.items()}

    def upstream(self, m: Materialized, seed: int) -> dict[str, Any] | None:
        """Upstream gradients sized by a float64 forward of the reference (backward specs only)."""
        import torch

        if not self.spec.grads:
            return None
        try:
            with torch.no_grad():
                outs = normalize(self.spec.reference(**reference_inputs(self.spec, m, upcast=True),
                                                     **self.kwargs(m.case)))
        except Exception as exc:  # noqa: BLE001 - the spec's reference is user code
            raise SpecBroken(f"the spec's reference raised {_first_line(exc)} on case {m.case.id}") from exc
        values = upstream_values(outs, seed)
        return expanded_values(values) if m.case.grad_layout == "expanded" else values

    # --- one case ---------------------------------------------------------------

    def run(self, case: Case, *, sensitivity: bool) -> CaseResult:
        import torch

        repro = self.repro_cmd.format(token=case.token())
        m = materialize(self.spec, case, self.device)
        upstream = self.upstream(m, case.seed)
        first = self._first_run(case, m, upstream, repro)
        if isinstance(first, CaseResult):
            return first
        outs1, snap1, findings = first
        try:
            ref = self.reference(m, upstream)
            base = self.baseline(m, upstream, snap1)
            cond = self.conditioning(m, upstream)
        except Exception as exc:  # noqa: BLE001 - the spec's reference is user code
            if is_fatal(exc):
                raise ContextLost(_first_line(exc)) from exc
            raise SpecBroken(f"the spec's reference raised {_first_line(exc)} on case {case.id}") from exc
        outs2 = self._second_run(case, m, upstream, repro, findings)
        if outs2 is not None:
            findings += self._reused(case, m, outs1, outs2, repro)
        del outs1  # only the snapshot is compared: a later write to the buffer cannot help
        comparisons = []
        base32: dict[str, Any] | None = None
        for k, r in ref.items():
            if k not in snap1:
                findings.append(self._missing(case, k, snap1, repro))
                continue
            comp = compare(k, snap1[k], r, base.get(k), self.rule, perturbed=cond.get(k))
            if baseline_unusable(comp):
                base32 = base32 if base32 is not None else self._baseline_fp32(m, upstream, snap1)
                torch_error = comp.details["torch_error"]
                comp = compare(k, snap1[k], r, base32.get(k), self.rule, perturbed=cond.get(k))
                comp.details.update({"baseline": "float32", "torch_error": torch_error})
                if not comp.ok:
                    comp.message += (f"\n(torch's own {comp.details.get('dtype')} result is off by {torch_error:.3g}, "
                                     f"so the baseline is torch in float32, rounded to the output dtype)")
            comparisons.append(comp)
            if not comp.ok:
                findings.append(_finding(self.spec_id, case, comp.kind, comp.message, repro, output=k,
                                         **comp.details))
            if outs2 is not None and comp.kind not in ("shape", "type") and isinstance(r, torch.Tensor):
                why = agree(k, snap1[k], outs2.get(k), bitwise=self.spec.deterministic, ref=r, base=base.get(k),
                            rule=self.rule, perturbed=cond.get(k))
                if why:
                    findings.append(_finding(self.spec_id, case, "unstable", why, repro, output=k))
        if sensitivity and not findings:
            findings += self._sensitivity(case, snap1, ref, base, repro)
        return CaseResult(case, findings, comparisons)

    def _baseline_fp32(self, m: Materialized, upstream: dict[str, Any] | None, like: dict[str, Any]
                       ) -> dict[str, Any]:
        try:
            return self.baseline_fp32(m, upstream, like)
        except Exception as exc:  # noqa: BLE001 - the spec's reference is user code
            if is_fatal(exc):
                raise ContextLost(_first_line(exc)) from exc
            raise SpecBroken(f"the spec's reference raised {_first_line(exc)} in float32 on case {m.case.id}") from exc

    def _first_run(self, case: Case, m: Materialized, upstream: dict[str, Any] | None, repro: str
                   ) -> CaseResult | tuple[dict[str, Any], dict[str, Any], list[Finding]]:
        import torch

        try:
            outs, watch = self.call(m, upstream)
            early = self._early_copy(outs)
            sync(self.device)
        except torch.cuda.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            return CaseResult(case, [_finding(self.spec_id, case, "out-of-memory",
                                              f"the candidate ran out of GPU memory on case {case.id}: {exc}", repro)])
        except Exception as exc:  # noqa: BLE001 - candidate code: a loud refusal, unless the context died
            if is_fatal(exc):
                raise ContextLost(_first_line(exc)) from exc
            limit = interpreter_error(exc)
            if limit is not None:
                trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                return CaseResult(case, [], unsupported=_first_line(limit), trace=trace)
            return CaseResult(case, [], refused=_first_line(exc))
        # before the guards, which put back an input the kernel wrote: an output that is that
        # input would seem to change after the call
        findings = self._unordered(case, outs, early, repro)
        findings += self._guards(case, m, watch, outs, repro)
        snap = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in outs.items()}
        return outs, snap, findings

    def _second_run(self, case: Case, m: Materialized, upstream: dict[str, Any] | None, repro: str,
                    findings: list[Finding]) -> dict[str, Any] | None:
        try:
            outs, _ = self.call(m, upstream)
            # Only where the candidate switched streams: that is what the delay makes reliable,
            # and the copy is one more set of outputs alive at the case's peak.
            early = self._early_copy(outs) if self.side_streams else {}
            sync(self.device)
        except Exception as exc:  # noqa: BLE001
            if is_fatal(exc):
                raise ContextLost(_first_line(exc)) from exc
            findings.append(_finding(self.spec_id, case, "unstable",
                                     f"the second run on the same inputs raised {_first_line(exc)}", repro))
            return None
        # The first run may have compiled its kernels after queueing them, outrunning the
        # side-stream delay; the second run is warm, so it is checked again.
        if not any(f.kind == "unordered-stream" for f in findings):
            findings += self._unordered(case, outs, early, repro)
        return outs

    @staticmethod
    def _early_copy(outs: dict[str, Any]) -> dict[str, Any]:
        """Copies made on the caller's stream before any wait: if the kernel finishes its work
        on another stream without ordering it (see :class:`SideStreams`), these see the
        unfinished buffers."""
        import torch

        return {k: v.clone() for k, v in outs.items() if isinstance(v, torch.Tensor)}

    def _unordered(self, case: Case, outs: dict[str, Any], early: dict[str, Any], repro: str) -> list[Finding]:
        if self.device != "cuda":
            return []  # no streams on the CPU: nothing can finish after the call returned
        return [_finding(self.spec_id, case, "unordered-stream",
                         f"output {k!r} changed after the caller's stream had finished: the kernel completes its work "
                         f"on another stream without ordering it with the caller's stream (make the caller's stream "
                         f"wait, e.g. torch.cuda.current_stream().wait_stream(side))", repro, output=k)
                for k, v in outs.items() if k in early and not bitwise_equal(early[k], v)]

    def _missing(self, case: Case, k: str, got: dict[str, Any], repro: str) -> Finding:
        if k.startswith("grad:"):
            msg = (f"the candidate produced no gradient for {k[5:]!r}: its outputs are not differentiable "
                   f"with respect to it (grads={list(self.spec.grads)}; wrap the kernel in a "
                   f"torch.autograd.Function with a backward)")
        else:
            msg = f"the candidate returned no output {k!r} (it returned {sorted(got)})"
        return _finding(self.spec_id, case, "missing-output", msg, repro, output=k)

    def _reused(self, case: Case, m: Materialized, outs1: dict[str, Any], outs2: dict[str, Any],
                repro: str) -> list[Finding]:
        """Two calls returned the same storage while the first result was still alive: a cached
        tensor, or a static buffer that the next call silently overwrites. (A view of an input
        is reported as such, not here.)"""
        import torch

        found = []
        inputs = {g.buffer.untyped_storage().data_ptr() for g in m.guarded.values()}
        for k, a in outs1.items():
            b = outs2.get(k)
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.numel() and b.numel() \
                    and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() \
                    and a.untyped_storage().data_ptr() not in inputs:
                found.append(_finding(
                    self.spec_id, case, "cached-output",
                    f"output {k!r}: two calls returned the same memory while the first result was still in use "
                    f"(a cached tensor from an earlier call, or a static buffer that each call overwrites)",
                    repro, output=k))
        return found

    def _guards(self, case: Case, m: Materialized, watch: OutputWatch, outs: dict[str, Any],
                repro: str) -> list[Finding]:
        import torch

        found = []
        sid = self.spec_id
        for name, g in m.guarded.items():
            if torch.equal(g.buffer, m.snapshots[name]):
                continue
            intact = g.guards_intact()
            g.buffer.copy_(m.snapshots[name])  # the reference and the second run see the original
            if not intact:
                found.append(_finding(sid, case, "out-of-bounds-write",
                                      f"the candidate wrote past the bounds of input {name!r} "
                                      f"(the guard band around it changed)", repro, input=name))
            else:
                found.append(_finding(sid, case, "input-modified",
                                      f"the candidate modified its input {name!r} (inputs must be unchanged "
                                      f"after the call)", repro, input=name))
        for g in watch.outputs:
            if not g.guards_intact():
                found.append(_finding(sid, case, "out-of-bounds-write",
                                      f"the candidate wrote past the end of an output buffer from gg.empty "
                                      f"({tuple(g.view.shape)})", repro))
        spans = [g.storage_span() for g in m.guarded.values()]
        for k, v in outs.items():
            if isinstance(v, torch.Tensor) and v.numel():
                p = v.data_ptr()
                if any(lo <= p < hi for lo, hi in spans):
                    found.append(_finding(sid, case, "output-aliases-input",
                                          f"output {k!r} is a view of an input: the kernel returned its input "
                                          f"instead of computing a result", repro, output=k))
        return found

    def _sensitivity(self, case: Case, out1: dict[str, Any], ref1: dict[str, Any], base1: dict[str, Any],
                     repro: str) -> list[Finding]:
        """New values for the same case: when the output does not change at all and the old
        output does not pass against the new reference, the kernel ignores its inputs."""
        import torch

        m2 = materialize(self.spec, case, self.device, salt=1)
        upstream = self.upstream(m2, case.seed + 1)
        try:
            outs2, _ = self.call(m2, upstream)
            sync(self.device)
        except Exception as exc:  # noqa: BLE001
            if is_fatal(exc):
                raise ContextLost(_first_line(exc)) from exc
            return []
        ref2 = self.reference(m2, upstream)
        base2 = self.baseline(m2, upstream, outs2)
        cond2 = self.conditioning(m2, upstream)
        found = []
        for k, r2 in ref2.items():
            a, b = out1.get(k), outs2.get(k)
            if not isinstance(a, torch.Tensor) or not isinstance(r2, torch.Tensor) or not bitwise_equal(a, b):
                continue
            if not compare(k, a, r2, base2.get(k), self.rule, perturbed=cond2.get(k)).ok:
                found.append(_finding(self.spec_id, case, "insensitive",
                                      f"output {k!r} did not change when the inputs changed, and the old result is "
                                      f"wrong for the new inputs: the kernel returns a cached or constant result",
                                      repro, output=k))
        return found


def bitwise_equal(a: Any, b: Any) -> bool:
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a is b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.numel():
        return True
    return torch.equal(as_bytes(a), as_bytes(b))

