"""``--all`` and ``--spec PATTERN``: which specs a run takes, beyond or within what the change selects.

``--all`` runs every spec in the repository (a nightly run lists the whole debt), each with that
reason. ``--spec`` keeps the specs whose id (``gate/rms_gate.py::rmsnorm``), file or name matches
one of its globs (``fnmatch``: ``*`` crosses ``/``). A pattern that keeps nothing is an error that
says why: no such spec at all, or specs this change does not select (then ``--all`` runs them).
"""
from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from .discovery import SpecInfo
from .errors import GateError
from .protocol.jobs import Job

ALL_REASON = "--all: every spec in the repository runs"


def matches(spec_id: str, pattern: str) -> bool:
    file, _, name = spec_id.partition("::")
    return any(fnmatch.fnmatchcase(text, pattern) for text in (spec_id, file, name))


def widen(why: dict[str, list[str]], specs: Sequence[SpecInfo]) -> dict[str, list[str]]:
    """``--all``: every spec runs; those the change selects keep their own reasons."""
    return {**{s.id: [ALL_REASON] for s in specs}, **why}


def narrow(why: dict[str, list[str]], known: Sequence[str], patterns: Sequence[str]) -> dict[str, list[str]]:
    """``--spec``: the selected specs that match a pattern; every pattern must keep one."""
    for pattern in patterns:
        if any(matches(sid, pattern) for sid in why):
            continue
        existing = sorted(sid for sid in known if matches(sid, pattern))
        if existing:
            shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if len(existing) > 3 else "")
            raise GateError(f"--spec {pattern!r} matches {shown}, which this change does not select",
                            hint="add --all to run every spec in the repository")
        example = f"e.g. --spec '{sorted(known)[0]}'" if known else "the policy's `specs:` globs find no spec"
        raise GateError(f"--spec {pattern!r} matches no spec in the repository",
                        hint=f"a pattern is a glob on spec ids PATH::NAME, files or names; {example}")
    return {sid: reasons for sid, reasons in why.items() if any(matches(sid, p) for p in patterns)}


def kernel_jobs_for(jobs: list[Job], kept_specs: set[str]) -> list[Job]:
    """With ``--spec``, kernel checks (compile) run for the kernels the kept specs cover only."""
    covered = {k for j in jobs if j.spec is not None and j.spec.id in kept_specs for k in j.kernels}
    return [j for j in jobs if j.spec is not None or set(j.kernels) & covered]


def narrowing_note(kept: int, selected: int, patterns: Sequence[str]) -> str | None:
    if kept == selected:
        return None
    shown = " ".join(f"--spec {p!r}" for p in patterns)
    return (f"{shown}: {kept} of the {selected} specs this change selects run; the other {selected - kept} are "
            f"not checked in this run")
