"""The reference worker: the spec's truth, computed in a process of its own.

It imports the spec with the repository's modules replaced by stand-ins (:mod:`.stubs`), so that
no code under review runs where the truth is computed; it describes the spec to the judge (the
judge imports no spec), builds each case's inputs itself from the case's token (they are
deterministic, so they are the very values the judge built), and answers with the float64
reference, the baseline (torch in the kernel's dtype), the rounding envelope and the upstream
gradients. Where the spec cannot do without the repository's code, the worker imports it for real
and every answer says so.

On a pull request the truth is the base's: where the job names the commit its truth comes from
(:func:`gpu_gate.protocol.jobs.truth_commit`), the spec, its reference and every repository module
they import are loaded from that commit's tree (``truth_root``), and the head's tree is not on
``sys.path``: a helper the change edits, or a repository package named like an installed one, is
never what computes the truth. Without that tree, a reference that needs the repository's code
cannot be computed, and says so.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..protocol import wire
from ..protocol.cases import Case
from ..protocol.messages import (BaselineFp32, BaselineFp32Reply, Describe, DescribeReply, ErrorReply, Flops, FlopsReply,
                                 HeadReference,
                                 HeadReferenceReply, Reply, Request, SpecDescription, Truth, TruthReply, Upstream,
                                 UpstreamReply, tensors)
from ..protocol.messages.reference import CaseRequest, read_recipe
from ..protocol.inputs import Materialized, materialize, perturbed_inputs, reference_inputs
from ..protocol.rounding import RoundingNoise, accumulation_dtype, arithmetic_dtype, unit_roundoff
from ..protocol.jobs import Job
from ..spec import Spec, upcast
from .calling import (call_with_grads, first_line, is_fatal, kwargs_for, normalize, upstream_from_recipe,
                      upstream_recipe)
from .loader import SpecImportError
from .stubs import RepositoryCode

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..protocol.wire import Json

    import torch

    from ..spec import Dim, Input


class ReferenceSide:
    """The reference's computations on one materialized case (in-process; the server below hands
    them to the judge)."""

    def __init__(self, spec: Spec, device: str) -> None:
        self.spec, self.device = spec, device

    def kwargs(self, case: Case) -> dict[str, object]:
        return kwargs_for(self.spec, case.dims)

    def reference(self, m: Materialized, upstream: Mapping[str, torch.Tensor] | None, *, upcast: bool = True
                  ) -> dict[str, object]:
        import torch

        inputs = reference_inputs(self.spec, m, upcast=upcast)
        if self.spec.grads:
            return call_with_grads(self.spec, self.spec.reference, inputs, self.kwargs(m.case), upstream)
        with torch.no_grad():
            return normalize(self.spec.reference(**inputs, **self.kwargs(m.case)))

    def flops(self, m: Materialized, upstream: Mapping[str, torch.Tensor] | None) -> int:
        """The floating-point operations of the reference on the case, forward and (for a backward
        spec) backward, as torch's FLOP counter counts them: matrix products, convolutions and
        attention; elementwise work and reductions count 0, so the figure is a lower bound."""
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            self.reference(m, upstream)
        return int(counter.get_total_flops())

    def conditioning(self, m: Materialized, upstream: Mapping[str, torch.Tensor] | None, *, storage: bool = False
                     ) -> dict[str, object]:
        """The float64 reference on inputs moved by up to one ulp of the kernel's arithmetic,
        with the rounding of every operation put back in (see :mod:`gpu_gate.protocol.rounding`):
        how far a correct kernel computing in that precision, accumulating in the spec's declared
        dtype in any order, may land from the truth on *these* inputs. ``storage``: the kernel
        also stores every intermediate in the data's own dtype (as torch's own bfloat16 or float16
        computation does), still accumulating as declared."""
        import torch

        inputs = perturbed_inputs(self.spec, m, m.case.seed)
        # The dispatch mode is thread-local, and on a GPU autograd runs backward on a device
        # thread of its own: keep backward on this thread, inside the mode.
        with self.rounding(m, storage=storage), torch.autograd.set_multithreading_enabled(False):
            if self.spec.grads:
                return call_with_grads(self.spec, self.spec.reference, inputs, self.kwargs(m.case), upstream)
            with torch.no_grad():
                return normalize(self.spec.reference(**inputs, **self.kwargs(m.case)))

    def rounding(self, m: Materialized, *, storage: bool = False) -> RoundingNoise:
        data = m.case.dtype
        acc = accumulation_dtype(self.spec.accumulate, data)
        device = next(iter(m.tensors.values())).device if m.tensors else self.device
        if storage:  # every intermediate stored in the data's dtype: each operation, and each sum's terms
            u = unit_roundoff(data)
            return RoundingNoise(u, unit_roundoff(acc), m.case.seed * 29 + 5, device, u_store=u)
        return RoundingNoise(unit_roundoff(arithmetic_dtype(data)), unit_roundoff(acc), m.case.seed * 29 + 3, device)

    def stores_lower(self, m: Materialized) -> bool:
        """Whether the data's dtype is coarser than the kernel's arithmetic (bfloat16, float16, fp8)."""
        return unit_roundoff(m.case.dtype) > unit_roundoff(arithmetic_dtype(m.case.dtype))

    def baseline(self, m: Materialized, upstream: Mapping[str, torch.Tensor] | None, like: Mapping[str, torch.dtype]
                 ) -> dict[str, object]:
        """torch in the kernel's dtype; where torch has no kernel for that dtype on this device,
        the float32 result rounded to it (the best the dtype can represent)."""
        try:
            return self.reference(m, upstream, upcast=False)
        except (RuntimeError, NotImplementedError, TypeError) as exc:
            if isinstance(exc, RepositoryCode) or is_fatal(exc):
                raise
            return self.baseline_fp32(m, upstream, like)

    def baseline_fp32(self, m: Materialized, upstream: Mapping[str, torch.Tensor] | None,
                      like: Mapping[str, torch.dtype]
                      ) -> dict[str, object]:
        """The reference computed in (at least) float32 on the dtype's inputs, rounded to each
        output's dtype (``like``: output name to torch dtype)."""
        import torch

        inputs = {k: upcast(v.detach()) for k, v in reference_inputs(self.spec, m, upcast=False).items()}
        kw = self.kwargs(m.case)
        if self.spec.grads:
            outs = call_with_grads(self.spec, self.spec.reference, inputs, kw, upstream)
        else:
            with torch.no_grad():
                outs = normalize(self.spec.reference(**inputs, **kw))
        return {k: (v.to(like[k]) if isinstance(like.get(k), torch.dtype) and isinstance(v, torch.Tensor) else v)
                for k, v in outs.items()}

    def upstream(self, m: Materialized, seed: int) -> dict[str, dict[str, object]] | None:
        """The recipe of the upstream gradients (see :func:`.calling.upstream_recipe`), sized by a
        float64 forward of the reference (backward specs only)."""
        import torch

        if not self.spec.grads:
            return None
        with torch.no_grad():
            outs = normalize(self.spec.reference(**reference_inputs(self.spec, m, upcast=True),
                                                 **self.kwargs(m.case)))
        return upstream_recipe(outs, seed, expanded=m.case.grad_layout == "expanded")


def describe(spec: Spec) -> SpecDescription:
    """What the judge knows of a spec: everything but its functions."""
    def plain(obj: Dim | Input) -> dict[str, Json]:
        return {"kind": type(obj).__name__, **json.loads(json.dumps(dataclasses.asdict(obj)))}

    return SpecDescription(
        name=spec.name, dims={k: plain(v) for k, v in spec.dims.items()},
        inputs={k: plain(v) for k, v in spec.inputs.items()}, dim_args=tuple(spec.dim_args), grads=tuple(spec.grads),
        covers=tuple(spec.covers), deterministic=spec.deterministic, tolerance=dataclasses.asdict(spec.tolerance),
        devices=tuple(spec.devices), checks=tuple(spec.checks) if spec.checks is not None else None,
        module=spec.module, file=spec.file, line=spec.line, accumulate=spec.accumulate, params=tuple(sorted(spec.params)),
        mutates=dict(spec.mutates), producer=tuple(spec.producer))


class ReferenceServer:
    """Answers the judge's ``describe``, ``upstream``, ``truth`` and ``baseline_fp32`` requests."""

    def __init__(self, job: Job, repo_root: Path, workdir: Path, device: str, *, isolate: bool = True,
                 spec: Spec | None = None, truth_root: Path | None = None, truth_missing: str | None = None) -> None:
        """``truth_root``: where this worker sees the tree the job's truth comes from; ``truth_missing``:
        why it has none, where the job names one."""
        from ..protocol.jobs import truth_commit

        self.job, self.repo_root, self.workdir, self.device = job, repo_root, workdir, device
        self.isolate = isolate
        wanted = truth_commit(job) is not None
        self.truth_root = truth_root if wanted else None
        self.truth_missing = (truth_missing or "the base's tree is not available") if wanted and truth_root is None \
            else None
        self._head: ReferenceServer | str | None = None  # the head's spec, when this change rewrote the reference
        self.isolated = False
        self.why: str | None = None  # why the spec needed the repository's code
        # why the truth cannot be computed at all (the base's tree is needed and missing): said to every
        # ask, not only the first (a judge's probe may ask first and carry on)
        self.unavailable: str | None = None
        # the last case asked: its token and salt, inputs, upstream gradients' recipe and values
        self._last: tuple[str, int, Materialized, dict[str, dict[str, object]] | None,
                          dict[str, torch.Tensor] | None] | None = None
        self.spec = spec if spec is not None else self._load(isolate)
        self.side = ReferenceSide(self.spec, device)

    def _load(self, isolate: bool) -> Spec:
        from .loader import load_spec

        if isolate:
            try:
                spec = load_spec(self.job, self.repo_root, self.workdir, stub_repository=True,
                                 truth_root=self.truth_root)
                self.isolated = True
                return spec
            except Exception as exc:  # noqa: BLE001 - the spec needs the repository's code: import it for real
                self.why = _why(exc)
        if self.isolate and self.truth_missing:  # the repository's code must be the base's, and it is not here
            raise self._truth_unavailable()
        loaded: Spec = load_spec(self.job, self.repo_root, self.workdir, truth_root=self.truth_root)
        return loaded

    def _truth_unavailable(self) -> SpecImportError:
        """The spec cannot be loaded as the job asks: its repository code must be the base's, and the
        base's tree is not here. Where the spec's import already needs that code, the job's finding is
        ``truth-unavailable``; where only its reference does, a ``reference-error`` with this text."""
        from ..protocol.messages import SpecImportFacts
        from ..protocol.jobs import truth_commit

        assert self.job.spec is not None
        commit = str(truth_commit(self.job) or "")[:12]
        return SpecImportError(SpecImportFacts(
            kind="truth-unavailable", file=self.job.spec.file, line=None,
            message=f"{self.job.spec.file}: the spec's reference needs the repository's code ({self.why}), which must "
                    f"come from the base's tree at {commit}, and {self.truth_missing}: the truth was not computed"))

    def _unisolate(self, exc: BaseException) -> None:
        from . import stubs

        finder = stubs.active()
        if finder is not None:
            stubs.uninstall(finder)
        self.isolated, self.why = False, _why(exc)
        self._last = None
        self.spec = self._load(False)
        self.side = ReferenceSide(self.spec, self.device)

    def handle(self, request: Request, blobs: list[bytearray]) -> tuple[Reply, wire.Blobs]:
        if isinstance(request, Describe):
            return DescribeReply(describe(self.spec), *self._status()), []
        if not isinstance(request, CaseRequest):
            return ErrorReply(request.op, "protocol", f"unknown request {request.op!r}"), []
        if self.unavailable is not None:  # every later ask too: the truth cannot be computed here
            return ErrorReply(request.op, "reference", self.unavailable, *self._status()), []
        for _ in range(2):  # once more after importing the repository's code for real
            try:
                return self._compute(request)
            except Exception as exc:  # noqa: BLE001 - the spec's reference is user code
                if _repository_code(exc) and self.isolated:
                    try:
                        self._unisolate(exc)
                    except SpecImportError as missing:
                        self.unavailable = missing.facts.message
                        return ErrorReply(request.op, "reference", missing.facts.message, *self._status()), []
                    continue
                if is_fatal(exc):
                    return ErrorReply(request.op, "fatal", first_line(exc), *self._status()), []
                case = request.case_id or "?"
                if _out_of_memory(exc):  # the GPU is shared: a fact about this case's size, not the spec
                    return ErrorReply(request.op, "oom", f"the spec's reference ran out of GPU memory on case {case}: "
                                                         f"{first_line(exc)}", *self._status()), []
                return ErrorReply(request.op, "reference", f"the spec's reference raised {first_line(exc)} on case "
                                                           f"{case}", *self._status()), []
        return ErrorReply(request.op, "reference", "the reference could not run", *self._status()), []

    def _status(self) -> tuple[bool, str | None, str]:
        """What every answer says of this worker: whether it runs apart from the code under review,
        why not, and whose tree the repository code it imported came from."""
        return self.isolated, self.why, "base" if self.truth_root is not None else "head"

    def _case(self, request: CaseRequest
              ) -> tuple[Materialized, dict[str, dict[str, object]] | None, dict[str, torch.Tensor] | None]:
        """The case's inputs, its upstream gradients' recipe and their values."""
        token, salt = request.case, request.salt
        if self._last is not None and self._last[:2] == (token, salt):
            return self._last[2], self._last[3], self._last[4]
        case = Case.from_token(token)
        m = materialize(self.spec, case, self.device, salt=salt)
        recipe = self.side.upstream(m, case.seed + salt)
        up = upstream_from_recipe(recipe, self.device) if recipe is not None else None
        self._last = (token, salt, m, recipe, up)
        return m, recipe, up

    def _compute(self, request: CaseRequest) -> tuple[Reply, wire.Blobs]:
        import torch

        blobs: wire.Blobs = []
        m, recipe, up = self._case(request)
        like = {k: getattr(torch, v) for k, v in getattr(request, "like", {}).items()}
        status = self._status()
        if isinstance(request, Upstream):  # its recipe: every worker makes the values itself (see calling.upstream_recipe)
            return UpstreamReply(read_recipe(recipe, "upstream"), *status), blobs
        if isinstance(request, BaselineFp32):
            # where torch's own low-precision result cannot be the yardstick: torch in float32, and the
            # envelope of a kernel that stores its intermediates in the data's dtype
            storage = self.side.conditioning(m, up, storage=True) if self.side.stores_lower(m) else None
            return BaselineFp32Reply(tensors.encode_dict(self.side.baseline_fp32(m, up, like), blobs),
                                     tensors.encode_dict(storage, blobs) if storage is not None else None,
                                     *status), blobs
        if isinstance(request, Truth):
            ref = self.side.reference(m, up)
            base = self.side.baseline(m, up, like)
            cond = self.side.conditioning(m, up)
            return TruthReply(tensors.encode_dict(ref, blobs), tensors.encode_dict(base, blobs),
                              tensors.encode_dict(cond, blobs), *status), blobs
        if isinstance(request, HeadReference):
            return self._head_reference(request, up, blobs)
        if isinstance(request, Flops):
            return FlopsReply(self.side.flops(m, up), None, *status), blobs
        return ErrorReply(request.op, "protocol", f"unknown request {request.op!r}"), []

    def _head_reference(self, request: HeadReference, up: Mapping[str, torch.Tensor] | None, blobs: wire.Blobs
                        ) -> tuple[Reply, wire.Blobs]:
        """The head's spec's reference on the same case and upstream gradients, where this change
        rewrote it: the judge compares it with the base's (a rewritten truth is a weakened rule).
        ``skipped``: why the two cannot be compared."""
        head = self._head_spec()
        isolated, why, tree = self._status()
        if isinstance(head, str):
            return HeadReferenceReply(skipped=head, isolated=isolated, why=why, tree=tree), []
        try:
            hm, _, _ = head._case(request)
            ref = head.side.reference(hm, up)
        except Exception as exc:  # noqa: BLE001 - the head's reference is code under review
            if is_fatal(exc):
                raise
            return HeadReferenceReply(raised=f"{first_line(exc)}", isolated=isolated, why=why, tree=tree), []
        return HeadReferenceReply(tensors.encode_dict(ref, blobs), isolated=isolated, why=why, tree=tree), blobs

    def _head_spec(self) -> ReferenceServer | str:
        from ..protocol.jobs import without_base
        from .loader import SpecImportError

        if self._head is None:
            try:
                head = ReferenceServer(without_base(self.job), self.repo_root, self.workdir, self.device,
                                       isolate=self.isolate)
            except SpecImportError as exc:
                self._head = f"the head's spec does not import ({exc.facts.message.splitlines()[0]})"
            except Exception as exc:  # noqa: BLE001 - the head's spec is code under review
                self._head = f"the head's spec does not import ({first_line(exc)})"
            else:
                mine, theirs = describe(self.spec), describe(head.spec)
                same = all(getattr(mine, k) == getattr(theirs, k) for k in ("dims", "inputs", "dim_args", "grads",
                                                                             "params"))
                self._head = head if same else "the head's spec takes other dims, inputs or gradients"
        return self._head


def _repository_code(exc: BaseException) -> bool:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, RepositoryCode):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _why(exc: BaseException) -> str:
    cur: BaseException | None = exc
    while cur is not None and not isinstance(cur, RepositoryCode):
        cur = cur.__cause__ or cur.__context__
    if cur is not None:
        return f"it uses {cur} from the repository"
    return f"it does not import without the repository's code ({first_line(exc)})"


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's CUDA out-of-memory error; the cache it left is emptied."""
    import torch

    if not isinstance(exc, torch.cuda.OutOfMemoryError):
        return False
    torch.cuda.empty_cache()
    return True
