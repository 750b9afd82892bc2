"""The base's policy against the head's: every setting that differs, and whether it weakens the rules."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..policy import Policy
from .change import Direction, RuleChange, ordinal

Flat = dict[str, object]
Judge = Callable[[Any, Any], tuple[Direction, str]]
_LEVELS = ("off", "advisory", "required")
_IGNORED = {"extends"}  # already merged in
_IGNORED_PREFIXES = ("cache.", "reports.", "runner.labels", "runner.gpus", "runner.fail_fast", "runner.jobs_per_gpu",
                     "checks.equivalence.shrink")


def flatten(value: object, prefix: str = "") -> Flat:
    if isinstance(value, dict):
        out: Flat = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}{key}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


def compare(base: Policy, head: Policy, file: str | None) -> list[RuleChange]:
    old, new = flatten(base.model_dump(mode="json")), flatten(head.model_dump(mode="json"))
    changes = []
    for key in sorted(set(old) | set(new)):
        if key in _IGNORED or key.startswith(_IGNORED_PREFIXES) or old.get(key) == new.get(key):
            continue
        direction, how = _judge(key)(old.get(key), new.get(key))
        changes.append(RuleChange(direction, f"{key}: {_show(old.get(key))} -> {_show(new.get(key))}{how}", file))
    return changes


def _judge(key: str) -> Judge:
    leaf = key.rsplit(".", 1)[-1]
    for pattern, judge in _JUDGES:
        if pattern == key or (pattern.startswith("*.") and leaf == pattern[2:]):
            return judge
    return _neutral


def _neutral(old: object, new: object) -> tuple[Direction, str]:
    return "changed", ""


def _order(*values: str) -> Judge:
    return lambda old, new: (ordinal(values, old, new), "")


def _more_is_stricter(old: Any, new: Any) -> tuple[Direction, str]:
    if not _numbers(old, new):
        return "changed", ""
    return ("weakened" if new < old else "tightened"), ""


def _more_is_looser(old: Any, new: Any) -> tuple[Direction, str]:
    """Tolerances and limits; None means no limit (for tolerances: the baseline rule instead)."""
    if old is None:
        return "weakened", " (a limit set by this change where there was none)" if new is not None else ""
    if new is None:
        return "weakened", " (limit removed)"
    if not _numbers(old, new):
        return "changed", ""
    factor = f" (x{new / old:.3g})" if old > 0 and new > old else ""
    return ("weakened" if new > old else "tightened"), factor


def _fixed_tolerance(old: object, new: object) -> tuple[Direction, str]:
    if old is None:  # the baseline-relative rule replaced by a fixed atol/rtol
        return "weakened", " (a fixed tolerance instead of the baseline-relative rule)"
    if new is None:
        return "tightened", " (back to the baseline-relative rule)"
    return _more_is_looser(old, new)


def _true_is_stricter(old: object, new: object) -> tuple[Direction, str]:
    return ("tightened" if new else "weakened"), ""


def _true_is_looser(old: object, new: object) -> tuple[Direction, str]:
    return ("weakened" if new else "tightened"), ""


def _fewer_is_looser(old: Sequence[object] | None, new: Sequence[object] | None) -> tuple[Direction, str]:
    """Lists that select what is checked; None means all (dtypes, dists, layouts)."""
    if old is None:
        return "weakened", " (narrowed from all)"
    if new is None:
        return "tightened", " (widened to all)"
    gone, added = [v for v in old if v not in new], [v for v in new if v not in old]
    if gone:
        return "weakened", f" (no longer: {', '.join(map(str, gone))})"
    return ("tightened" if added else "changed"), ""


def _more_is_looser_list(old: Sequence[object] | None, new: Sequence[object] | None) -> tuple[Direction, str]:
    """Exclusion lists: an added entry checks less."""
    added = [v for v in new or () if v not in (old or ())]
    if added:
        return "weakened", f" (now excluded: {', '.join(map(str, added))})"
    return "tightened", ""


def _more_taken(old: Sequence[object] | None, new: Sequence[object] | None) -> tuple[Direction, str]:
    """setup_outputs: an added glob lets the jobs run more of what a build step wrote in the work tree."""
    added = [v for v in new or () if v not in (old or ())]
    if added:
        return "weakened", f" (now taken from the work tree: {', '.join(map(str, added))})"
    return "tightened", ""


def _seed(old: object, new: object) -> tuple[Direction, str]:
    if old is None:
        return "weakened", " (the same inputs on every run: a kernel can be fitted to them)"
    return ("tightened", " (fresh inputs on every run)") if new is None else ("changed", "")


def _tool(old: object, new: object) -> tuple[Direction, str]:
    return "weakened", " (a tool path chosen by this change: the tool decides what the sanitizer sees)"


_JUDGES: list[tuple[str, Judge]] = [
    ("*.level", _order(*_LEVELS)),
    ("uncovered", _order("ignore", "warn", "fail")),
    ("refusals", _order("ignore", "warn", "fail")),
    ("not_run", _order("warn", "fail")),
    ("rule_changes", _order("warn", "fail")),
    ("preexisting", _order("warn", "fail")),
    ("checks.equivalence.regression_factor", _more_is_looser),
    ("checks.compile.resources_level", _order("advisory", "required")),
    ("kernels.include", _fewer_is_looser),
    ("kernels.exclude", _more_is_looser_list),
    ("setup_outputs", _more_taken),
    ("specs", _fewer_is_looser),
    ("checks.compile.archs", _fewer_is_looser),
    ("checks.equivalence.dtypes", _fewer_is_looser),
    ("checks.equivalence.dists", _fewer_is_looser),
    ("checks.equivalence.index_dists", _fewer_is_looser),
    ("checks.equivalence.layouts", _fewer_is_looser),
    ("checks.equivalence.shapes", _fewer_is_looser),
    ("checks.equivalence.tolerance.baseline_factor", _more_is_looser),
    ("checks.equivalence.tolerance.atol", _fixed_tolerance),
    ("checks.equivalence.tolerance.rtol", _fixed_tolerance),
    ("checks.equivalence.seed", _seed),
    ("checks.compile.max_spill_bytes", _more_is_looser),
    ("checks.compile.max_local_bytes", _more_is_looser),
    ("*.cases", _more_is_stricter),
    ("*.repeats", _more_is_stricter),
    ("*.max_reduction", _more_is_stricter),
    ("*.max_case_bytes", _more_is_stricter),
    ("*.time_budget_s", _more_is_stricter),
    ("*.growth", _true_is_stricter),
    ("*.disguised_replay", _true_is_stricter),
    ("*.concurrent_load", _true_is_stricter),
    ("*.leak_check", _true_is_stricter),
    ("cuda.sanitizer", _tool),
    ("cuda.nvcc", _tool),
    ("runner.health.allow_other_processes", _true_is_looser),
    ("runner.health.max_temperature_c", _more_is_looser),
    ("runner.health.min_free_memory_mib", _more_is_stricter),
]


def _numbers(*values: object) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def _show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)
