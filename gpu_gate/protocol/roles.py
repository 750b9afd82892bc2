"""A job's workers by role: which ones the executor starts for a check, and what each serves.

A check of a spec has a ``candidate`` (the head's code) and a ``reference`` (the spec's truth); the
compile check has a ``compiler`` (it imports and compiles the head's kernel files). In a pull
request each adds ``base``, the same work on the base's tree: the base's code on the spec, or the
base's kernel files compiled.
"""
from __future__ import annotations

CANDIDATE = "candidate"
REFERENCE = "reference"
COMPILER = "compiler"
BASE = "base"

COMPILE_CHECK = "compile"


def worker_roles(check: str, differential: bool) -> tuple[str, ...]:
    """The roles of a job's workers, the one whose code is judged first."""
    own = (COMPILER,) if check == COMPILE_CHECK else (CANDIDATE, REFERENCE)
    return (*own, BASE) if differential else own


def serves(check: str, role: str) -> str:
    """What the worker of ``role`` is started as: the compile check's base compiles, as its head's does."""
    return COMPILER if check == COMPILE_CHECK and role == BASE else role
