"""A spec at the base against the same spec at the head: what each change does to the rules."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

from .. import pyscan
from .change import Direction, RuleChange
from .specrules import UNREAD, SpecRules

_DEFAULT_DEVICES = ["cuda", "cpu"]
_CHECKED_KEYS = {"tolerance", "dims", "inputs", "checks", "grads", "deterministic", "devices", "reference", "mutates",
                 "producer"}


class Context:
    """What the comparison needs to know about the change: the head's files, which changed, and
    which repository modules define kernels."""

    def __init__(self, files: frozenset[str], changed: set[str], is_kernel_module: Callable[[str], bool],
                 policy_factor: float) -> None:
        self.files = files
        self.index = pyscan.ModuleIndex(files)
        self.changed = changed
        self.is_kernel_module = is_kernel_module
        self.policy_factor = policy_factor


def compare(base: SpecRules, head: SpecRules, ctx: Context) -> list[RuleChange]:
    out: list[RuleChange] = []

    def add(direction: Direction, what: str, key: str) -> None:
        out.append(RuleChange(direction, f"spec {head.name}: {what}", head.file, head.line_of(key), head.id))

    _tolerance(base, head, ctx, add)
    _dims(base, head, add)
    _inputs(base, head, add)
    _checks(base, head, add)
    _lists(base, head, add)
    _reference(base, head, add)
    _mutates(base, head, add)
    _producer(base, head, add)
    for key in sorted((set(base.keywords) | set(head.keywords)) - _CHECKED_KEYS):
        if base.shape(key) != head.shape(key):
            add("changed", f"{key}= changed", key)
    out += reference_calls_code_under_review(head, ctx, base)
    out += rules_from_modified_modules(head, ctx)
    return out


_RULE_KEYS = ("tolerance", "dims", "inputs", "checks", "grads", "devices", "params", "deterministic", "mutates",
              "producer")


def rules_from_modified_modules(head: SpecRules, ctx: Context) -> list[RuleChange]:
    """A rule written as a name imported from a repository module (`tolerance=TOL` from gate/common.py)
    changes with that module: when this change modifies it, the rule changed without the spec showing it."""
    out = []
    for key in _RULE_KEYS:
        node = head.keywords.get(key)
        if node is None:
            continue
        for file, name in sorted(head.modules_used(node, ctx.index).items()):
            if file in ctx.changed:
                out.append(RuleChange("weakened", f"spec {head.name}: {key}= uses {name!r} from {file}, which this "
                                                  f"change modifies (write the rule in the spec itself)",
                                      head.file, head.line_of(key), head.id))
    return out


Add = Callable[[Direction, str, str], None]


def _tolerance(base: SpecRules, head: SpecRules, ctx: Context, add: Add) -> None:
    old, new = base.literal("tolerance"), head.literal("tolerance")
    if old is UNREAD or new is UNREAD:
        if base.shape("tolerance") != head.shape("tolerance"):
            add("weakened", "tolerance= changed and is not a literal gg.Tolerance(...), so gpu-gate cannot tell by how "
                            "much (write it as gg.Tolerance(baseline_factor=...))", "tolerance")
        return
    old, new = _tol(old), _tol(new)
    f_old, f_new = old.get("baseline_factor") or ctx.policy_factor, new.get("baseline_factor") or ctx.policy_factor
    if _num(f_old) and _num(f_new) and f_old != f_new:
        if f_new > f_old:
            add("weakened", f"tolerance loosened: baseline_factor {f_old:g} -> {f_new:g} (x{f_new / f_old:.3g})",
                "tolerance")
        else:
            add("tightened", f"tolerance tightened: baseline_factor {f_old:g} -> {f_new:g}", "tolerance")
    for key in ("atol", "rtol"):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if a is None:
            add("weakened", f"tolerance loosened: a fixed {key}={b} replaces the baseline-relative rule", "tolerance")
        elif b is None:
            add("tightened", f"tolerance: {key} removed (the baseline-relative rule applies)", "tolerance")
        elif _num(a) and _num(b):
            how = f"loosened: {key} {a:g} -> {b:g}" + (f" (x{b / a:.3g})" if a > 0 else "")
            add("weakened" if b > a else "tightened", f"tolerance {how}" if b > a else f"tolerance tightened: {key} "
                                                                                         f"{a:g} -> {b:g}", "tolerance")


def _tol(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        return {}
    args = value.get("args") or []
    named = {k: v for k, v in value.items() if k in ("baseline_factor", "atol", "rtol")}
    if args:
        named.setdefault("baseline_factor", args[0])
    return named


def _dims(base: SpecRules, head: SpecRules, add: Add) -> None:
    old, new = base.literal("dims", {}), head.literal("dims", {})
    if old is UNREAD or new is UNREAD or not isinstance(old, dict) or not isinstance(new, dict):
        if base.shape("dims") != head.shape("dims"):
            add("weakened", "dims= changed and is not a literal mapping of gg.Dim(...), so gpu-gate cannot tell "
                            "whether it narrows the sizes tested", "dims")
        return
    for name in sorted(set(old) | set(new)):
        if name not in new:
            add("changed", f"dim {name!r} removed", "dims")
        elif name not in old:
            add("changed", f"dim {name!r} added", "dims")
        else:
            _dim(name, _dim_fields(old[name]), _dim_fields(new[name]), add)


def _dim_fields(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        return {"raw": value}
    args = list(value.get("args") or [])
    out = {"lo": args[0] if args else value.get("lo"), "hi": args[1] if len(args) > 1 else value.get("hi"),
           "reduction": args[2] if len(args) > 2 else value.get("reduction", False),
           "multiple_of": args[3] if len(args) > 3 else value.get("multiple_of", 1),
           "values": args[4] if len(args) > 4 else value.get("values")}
    return out


def _dim(name: str, old: dict[str, Any], new: dict[str, Any], add: Add) -> None:
    if old == new:
        return
    lo0, hi0, lo1, hi1 = old.get("lo"), old.get("hi"), new.get("lo"), new.get("hi")
    if _num(lo0) and _num(hi0) and _num(lo1) and _num(hi1) and (lo0, hi0) != (lo1, hi1):
        narrowed = lo1 > lo0 or hi1 < hi0
        add("weakened" if narrowed else "tightened",
            f"dim {name!r} {'narrowed' if narrowed else 'widened'}: [{lo0}, {hi0}] -> [{lo1}, {hi1}]", "dims")
    if old.get("reduction") and not new.get("reduction"):
        add("weakened", f"dim {name!r} no longer marked reduction=True (its error growth is not measured)", "dims")
    elif new.get("reduction") and not old.get("reduction"):
        add("tightened", f"dim {name!r} marked reduction=True", "dims")
    m0, m1 = old.get("multiple_of") or 1, new.get("multiple_of") or 1
    if _num(m0) and _num(m1) and m0 != m1:
        add("weakened" if m1 % m0 == 0 and m1 > m0 else "changed", f"dim {name!r} multiple_of {m0} -> {m1}", "dims")
    v0, v1 = old.get("values"), new.get("values")
    if v0 != v1:
        if v1 is not None and (v0 is None or not set(v0) <= set(v1)):
            add("weakened", f"dim {name!r} restricted to the sizes {v1}", "dims")
        else:
            add("tightened", f"dim {name!r} sizes widened", "dims")
    if "raw" in old or "raw" in new:
        add("changed", f"dim {name!r} changed", "dims")


def _inputs(base: SpecRules, head: SpecRules, add: Add) -> None:
    old, new = base.literal("inputs", {}), head.literal("inputs", {})
    if old is UNREAD or new is UNREAD or not isinstance(old, dict) or not isinstance(new, dict):
        if base.shape("inputs") != head.shape("inputs"):
            add("weakened", "inputs= changed and is not a literal mapping of gg.Tensor/gg.Index, so gpu-gate cannot "
                            "tell whether it narrows the dtypes tested", "inputs")
        return
    for name in sorted(set(old) | set(new)):
        if name not in new or name not in old:
            add("changed", f"input {name!r} {'removed' if name not in new else 'added'}", "inputs")
            continue
        a, b = _input_fields(old[name]), _input_fields(new[name])
        for axis in ("dtypes", "dists", "layouts"):
            _narrowing(f"input {name!r} {axis}", a.get(axis), b.get(axis), add)
        if a.get("grad", True) and not b.get("grad", True):
            add("weakened", f"input {name!r} grad=False (its gradient is no longer checked)", "inputs")
        if a.get("shape") != b.get("shape") or a.get("__call__") != b.get("__call__"):
            add("changed", f"input {name!r} shape or kind changed", "inputs")


def _input_fields(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        return {}
    args = list(value.get("args") or [])
    out = dict(value)
    out["shape"] = args[0] if args else value.get("shape")
    if value.get("__call__") == "Tensor":
        dtypes = value.get("dtypes") or (args[1] if len(args) > 1 else None)
        dtype = value.get("dtype") or (args[2] if len(args) > 2 else None)
        out["dtypes"] = dtypes if dtypes is not None else [dtype] if dtype is not None else ["float32"]
    elif value.get("__call__") == "Index":
        out["dtypes"] = [value.get("dtype", "int64")]
    return out


def _narrowing(what: str, old: Any, new: Any, add: Add) -> None:
    """None means everything gpu-gate offers."""
    if old == new:
        return
    if old is None:
        add("weakened", f"{what} narrowed from all to {new}", "inputs")
        return
    if new is None:
        add("tightened", f"{what} widened to all", "inputs")
        return
    gone = [v for v in old if v not in new]
    added = [v for v in new if v not in old]
    if gone:
        add("weakened", f"{what} narrowed: {old} -> {new} (no longer: {', '.join(map(str, gone))})", "inputs")
    elif added:
        add("tightened", f"{what} widened: {old} -> {new}", "inputs")


def _checks(base: SpecRules, head: SpecRules, add: Add) -> None:
    old, new = base.literal("checks"), head.literal("checks")
    if old == new:
        return
    if old is UNREAD or new is UNREAD:
        add("weakened", "checks= changed and is not a literal list, so gpu-gate cannot tell which checks still run",
            "checks")
        return
    from ..judge.checks import CHECKS

    before = list(CHECKS) if old is None else list(old)
    after = list(CHECKS) if new is None else list(new)
    gone = [c for c in before if c not in after]
    if gone:
        add("weakened", f"checks removed from the spec: {', '.join(gone)}" + (" (checks=[])" if new == [] else ""),
            "checks")
    elif len(after) > len(before):
        add("tightened", f"checks added to the spec: {', '.join(c for c in after if c not in before)}", "checks")


def _mutates(base: SpecRules, head: SpecRules, add: Add) -> None:
    """``mutates=`` allows writes into inputs: a new or changed entry lets the kernel write where it
    could not before (weakened); an entry removed forbids it again (tightened)."""
    old, new = base.literal("mutates", {}), head.literal("mutates", {})
    if old is UNREAD or new is UNREAD or not isinstance(old, dict) or not isinstance(new, dict):
        if base.shape("mutates") != head.shape("mutates"):
            add("weakened", "mutates= changed and is not a literal dict, so gpu-gate cannot tell which inputs the "
                            "kernel may now write", "mutates")
        return
    allowed = sorted(f"{k} -> {v}" for k, v in new.items() if old.get(k) != v)
    if allowed:
        add("weakened", f"inputs the kernel may now write in place (mutates=): {', '.join(map(str, allowed))}",
            "mutates")
    gone = sorted(str(k) for k in old if k not in new)
    if gone:
        add("tightened", f"inputs no longer allowed to be written in place: {', '.join(gone)}", "mutates")


def _producer(base: SpecRules, head: SpecRules, add: Add) -> None:
    """``producer=`` names inputs another kernel writes just before the call: one no longer named
    is no longer checked for a read before its producer finished (weakened)."""
    def names(v: object) -> object:
        return [v] if isinstance(v, str) else v

    old, new = names(base.literal("producer", [])), names(head.literal("producer", []))
    if old is UNREAD or new is UNREAD or not isinstance(old, (list, tuple)) or not isinstance(new, (list, tuple)):
        if base.shape("producer") != head.shape("producer"):
            add("weakened", "producer= changed and is not a literal list, so gpu-gate cannot tell which inputs are "
                            "still written by a producer before the call", "producer")
        return
    gone = [str(n) for n in old if n not in new]
    if gone:
        add("weakened", f"inputs no longer written by a producer just before the call (producer=): "
                        f"{', '.join(gone)}", "producer")
    added = [str(n) for n in new if n not in old]
    if added and not gone:
        add("tightened", f"inputs now written by a producer just before the call (producer=): {', '.join(added)}",
            "producer")


def _lists(base: SpecRules, head: SpecRules, add: Add) -> None:
    grads0, grads1 = base.literal("grads", []), head.literal("grads", [])
    if grads0 is not UNREAD and grads1 is not UNREAD and grads0 != grads1:
        gone = [g for g in grads0 if g not in grads1]
        add("weakened" if gone else "tightened",
            f"gradients {'no longer checked' if gone else 'now checked'} for: "
            f"{', '.join(gone or [g for g in grads1 if g not in grads0])}", "grads")
    det0, det1 = base.literal("deterministic", False), head.literal("deterministic", False)
    if det0 is True and det1 is not True:
        add("weakened", "deterministic=True removed (outputs need no longer be bitwise identical)", "deterministic")
    elif det1 is True and det0 is not True:
        add("tightened", "deterministic=True", "deterministic")
    dev0, dev1 = base.literal("devices", _DEFAULT_DEVICES), head.literal("devices", _DEFAULT_DEVICES)
    if dev0 is not UNREAD and dev1 is not UNREAD and list(dev0) != list(dev1):
        gone = [d for d in dev0 if d not in dev1]
        add("weakened" if gone else "tightened", f"devices {list(dev0)} -> {list(dev1)}", "devices")


def _reference(base: SpecRules, head: SpecRules, add: Add) -> None:
    if base.reference_shape() != head.reference_shape():
        add("changed", "reference changed by this change: review it (the base's reference judges this change; "
                       "the new one judges the changes after it)", "reference")


def reference_calls_code_under_review(head: SpecRules, ctx: Context, base: SpecRules | None) -> list[RuleChange]:
    """A reference that uses a module of the code under review compares that code with itself: the kernel
    modules, the modules the candidate calls into, and the modules this change modifies."""
    node = head.keywords.get("reference")
    if node is None:
        return []
    used = head.modules_used(node, ctx.index)
    candidate = head.modules_used(head.candidate, ctx.index)
    before = base.modules_used(base.keywords["reference"], ctx.index) if base and "reference" in base.keywords else {}
    out = []
    for file, name in sorted(used.items()):
        why = ("the candidate calls into it" if file in candidate else
               "it defines kernels" if ctx.is_kernel_module(file) else
               "this change modifies it" if file in ctx.changed else None)
        if why is None or (file in before and file not in ctx.changed):
            continue  # unchanged and already so at the base: not this change's doing
        out.append(RuleChange("weakened", f"spec {head.name}: the reference calls into the code under review "
                                          f"({name!r} from {file}; {why}): the kernel would be compared with itself "
                                          f"(write the reference in plain torch)",
                              head.file, head.line_of("reference"), head.id))
    return out


def _num(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
