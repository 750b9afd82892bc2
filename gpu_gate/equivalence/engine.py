"""Run one case: candidate, reference (float64), baseline (torch in the kernel's dtype),
candidate again; then every anti-exploit guard. Returns findings; never prints."""
from __future__ import annotations

import dataclasses
from typing import Any

from ..findings import Finding, Severity
from ..spec import Spec
from .cases import Case
from .compare import Comparison, Rule, agree, compare
from .guard import OutputWatch
from .inputs import Materialized, materialize, reference_inputs

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
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _upstream(outs: dict[str, Any], case: Case, seed: int) -> dict[str, Any]:
    """A random upstream gradient per output: never all ones, sometimes non-contiguous."""
    import torch

    gen = torch.Generator(device=next(iter(outs.values())).device)
    gen.manual_seed(seed * 17 + 5)
    grads = {}
    for k, o in outs.items():
        if case.grad_layout == "transposed" and o.dim() >= 2:
            g = torch.randn((*o.shape[:-2], o.shape[-1], o.shape[-2]), generator=gen, device=o.device,
                            dtype=torch.float64).transpose(-1, -2)
        else:
            g = torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float64)
        grads[k] = g
    return grads


def _with_grads(spec: Spec, fn: Any, inputs: dict[str, Any], upstream: dict[str, Any] | None) -> dict[str, Any]:
    import torch

    if not spec.grads:
        return normalize(fn(**inputs, **spec.params))
    leaves = {}
    for g in spec.grads:
        leaves[g] = inputs[g].detach().requires_grad_(True)
        inputs = {**inputs, g: leaves[g]}
    outs = normalize(fn(**inputs, **spec.params))
    diff_outs = {k: v for k, v in outs.items() if isinstance(v, torch.Tensor) and v.requires_grad}
    if upstream is None:
        upstream = {}
    gos = [upstream[k].to(v.dtype) for k, v in diff_outs.items() if k in upstream]
    if diff_outs and gos and len(gos) == len(diff_outs):
        grads = torch.autograd.grad(list(diff_outs.values()), list(leaves.values()), gos, allow_unused=True)
        for name, gr in zip(leaves, grads):
            outs[f"grad:{name}"] = gr
    return {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in outs.items()}


def _forward_shapes(spec: Spec, m: Materialized) -> dict[str, Any]:
    """Reference forward in float64, to size the upstream gradients."""
    import torch

    with torch.no_grad():
        return normalize(spec.reference(**reference_inputs(spec, m, upcast=True), **spec.params))


def _finding(spec_id: str, case: Case, kind: str, message: str, repro: str, severity: Severity = Severity.ERROR,
             **details: Any) -> Finding:
    return Finding(check="equivalence", kind=kind, message=message, severity=severity, spec=spec_id, case=case.id,
                   repro=repro, details={"case": case.describe(), "token": case.token(), **details})


class CaseRunner:
    def __init__(self, spec: Spec, spec_id: str, device: str, rule: Rule, repro_cmd: str) -> None:
        self.spec = spec
        self.spec_id = spec_id
        self.device = device
        self.rule = rule
        self.repro_cmd = repro_cmd  # with {token}

    def _call(self, m: Materialized, upstream: dict[str, Any] | None) -> tuple[dict[str, Any], OutputWatch]:
        with OutputWatch() as watch:
            outs = _with_grads(self.spec, self.spec.fn, dict(m.tensors), upstream)
        return outs, watch

    def _reference(self, m: Materialized, upstream: dict[str, Any] | None, *, upcast: bool) -> dict[str, Any]:
        import torch

        inputs = reference_inputs(self.spec, m, upcast=upcast)
        if self.spec.grads:
            return _with_grads(self.spec, self.spec.reference, inputs, upstream)
        with torch.no_grad():
            return normalize(self.spec.reference(**inputs, **self.spec.params))

    def _baseline(self, m: Materialized, upstream: dict[str, Any] | None, like: dict[str, Any]) -> dict[str, Any]:
        """torch in the kernel's dtype; where torch has no kernel for that dtype on this device,
        the float32 result rounded to it (the best the dtype can represent)."""
        import torch

        try:
            return self._reference(m, upstream, upcast=False)
        except (RuntimeError, NotImplementedError, TypeError):
            inputs = {k: (v.detach().to(torch.float32) if v.is_floating_point() else v)
                      for k, v in reference_inputs(self.spec, m, upcast=False).items()}
            outs = _with_grads(self.spec, self.spec.reference, inputs, upstream) if self.spec.grads else \
                normalize(self.spec.reference(**inputs, **self.spec.params))
            return {k: (v.to(like[k].dtype) if k in like and isinstance(v, torch.Tensor) else v)
                    for k, v in outs.items()}

    def run(self, case: Case, *, sensitivity: bool) -> CaseResult:
        import torch

        spec, sid = self.spec, self.spec_id
        repro = self.repro_cmd.format(token=case.token())
        findings: list[Finding] = []
        m = materialize(spec, case, self.device)
        upstream = None
        try:
            if spec.grads:
                upstream = _upstream(_forward_shapes(spec, m), case, case.seed)
        except Exception as exc:  # noqa: BLE001 - the spec's reference is user code
            raise SpecBroken(f"the spec's reference raised {type(exc).__name__}: {exc} on case {case.id}") from exc
        # 1. candidate, first run (before the reference, so it cannot pick up freed reference buffers)
        try:
            outs1, watch = self._call(m, upstream)
            stream_view = {k: v.clone() for k, v in outs1.items() if isinstance(v, torch.Tensor)}
            sync(self.device)
        except torch.cuda.OutOfMemoryError as exc:
            torch.cuda.empty_cache()
            return CaseResult(case, [_finding(sid, case, "out-of-memory",
                                              f"the candidate ran out of GPU memory on case {case.id}: {exc}", repro)])
        except Exception as exc:  # noqa: BLE001 - candidate code: a loud refusal, unless the context died
            if is_fatal(exc):
                raise ContextLost(f"{type(exc).__name__}: {exc}") from exc
            msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            return CaseResult(case, [], refused=msg)
        findings += self._guards(case, m, watch, outs1, repro)
        for k, v in outs1.items():
            if k in stream_view and not _bitwise_equal(stream_view[k], v):
                findings.append(_finding(
                    sid, case, "unordered-stream",
                    f"output {k!r} changed after the caller's stream had finished: the kernel completes its work "
                    f"on another stream without ordering it with the caller's stream", repro))
        snap1 = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in outs1.items()}
        # 2. reference (float64) and baseline (the kernel's dtype)
        try:
            ref = self._reference(m, upstream, upcast=True)
            base = self._baseline(m, upstream, snap1)
        except Exception as exc:  # noqa: BLE001
            raise SpecBroken(f"the spec's reference raised {type(exc).__name__}: {exc} on case {case.id}") from exc
        # 3. candidate again: must agree with its first run
        try:
            outs2, _ = self._call(m, upstream)
            sync(self.device)
        except Exception as exc:  # noqa: BLE001
            if is_fatal(exc):
                raise ContextLost(f"{type(exc).__name__}: {exc}") from exc
            outs2 = None
            findings.append(_finding(sid, case, "unstable", f"the second run on the same inputs raised "
                                     f"{type(exc).__name__}: {exc}", repro))
        comparisons = []
        for k, r in ref.items():
            if k not in snap1:
                findings.append(_finding(sid, case, "missing-output", f"the candidate returned no output {k!r} "
                                         f"(it returned {sorted(snap1)})", repro))
                continue
            comp = compare(k, snap1[k], r, base.get(k), self.rule)
            comparisons.append(comp)
            if not comp.ok:
                findings.append(_finding(sid, case, comp.kind, comp.message, repro, output=k, **comp.details))
            if outs2 is not None and comp.kind not in ("shape", "type"):
                why = agree(k, snap1[k], outs2.get(k), bitwise=spec.deterministic, ref=r, base=base.get(k),
                            rule=self.rule)
                if why:
                    findings.append(_finding(sid, case, "unstable", why, repro, output=k))
        if sensitivity and not findings:
            findings += self._sensitivity(case, snap1, ref, repro)
        return CaseResult(case, findings, comparisons)

    def _guards(self, case: Case, m: Materialized, watch: OutputWatch, outs: dict[str, Any],
                repro: str) -> list[Finding]:
        import torch

        found = []
        sid = self.spec_id
        for name, g in m.guarded.items():
            if not torch.equal(g.buffer, m.snapshots[name]):
                if not g.guards_intact():
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

    def _sensitivity(self, case: Case, out1: dict[str, Any], ref1: dict[str, Any], repro: str) -> list[Finding]:
        """A perturbation that changes the reference must change the output."""
        import torch

        m2 = materialize(self.spec, case, self.device, salt=1)
        upstream = None
        if self.spec.grads:
            upstream = _upstream(_forward_shapes(self.spec, m2), case, case.seed + 1)
        ref2 = self._reference(m2, upstream, upcast=True)
        try:
            outs2, _ = self._call(m2, upstream)
            sync(self.device)
        except Exception as exc:  # noqa: BLE001
            if is_fatal(exc):
                raise ContextLost(str(exc)) from exc
            return []
        found = []
        for k, r2 in ref2.items():
            a, b, r1 = out1.get(k), outs2.get(k), ref1.get(k)
            if not all(isinstance(t, torch.Tensor) for t in (a, b, r1)) or a.shape != b.shape or r1.shape != r2.shape:
                continue
            ref_moved = not torch.allclose(r1, r2, equal_nan=True)
            if ref_moved and _bitwise_equal(a, b):
                found.append(_finding(self.spec_id, case, "insensitive",
                                      f"output {k!r} did not change when the inputs changed (the reference did): "
                                      f"the kernel returns a cached or constant result", repro, output=k))
        return found


def _bitwise_equal(a: Any, b: Any) -> bool:
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a is b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)) if a.numel() else True
