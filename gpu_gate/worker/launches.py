"""Runs in the job process: which kernels a spec really launched.

A spec that imports a package whose ``__init__`` re-exports every op imports every kernel
file, but it exercises only the kernels it launches. While a job runs, every Triton launch
(``JITFunction.run``, and ``InterpretedFunction.run`` under ``TRITON_INTERPRET=1``) and every
``gg.cuda`` kernel launch is recorded by file and function. A Triton kernel's ``@triton.jit``
helpers are compiled into it, so they are recorded with it: a changed helper file is
exercised by whoever launches a kernel that calls into it.

The record is only as honest as the process it runs in: until the comparison moves out of
the candidate's process, a candidate can patch this module like any other. The planner
never trusts it more than the static import graph it refines (see ``gpu_gate.coverage``).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FunctionType

_LOCK = threading.Lock()
_COMPILE = [0.0]
_active: list[Recorder] = []


class Recorder:
    """The kernels launched while it is active: ``(file, function, language)``, files relative
    to the repository (kernels from outside the repository are left out)."""

    def __init__(self, repo_root: Path) -> None:
        self.root = os.path.realpath(repo_root) + os.sep
        self.kernels: set[tuple[str, str, str]] = set()
        self.helpers: set[tuple[str, str]] = set()  # @triton.jit functions compiled into a launched kernel
        self._seen: set[int] = set()

    def _rel(self, filename: str | None) -> str | None:
        if not filename:
            return None
        real = os.path.realpath(filename)
        return real[len(self.root):].replace(os.sep, "/") if real.startswith(self.root) else None

    def triton(self, jitfn: object) -> None:
        key = id(jitfn)
        if key in self._seen:
            return
        self._seen.add(key)
        fn = _python_function(jitfn)
        rel = self._rel(getattr(getattr(fn, "__code__", None), "co_filename", None))
        if fn is None or rel is None:
            return
        self.kernels.add((rel, fn.__name__, "triton"))
        for dep in _jit_dependencies(fn):
            dep_rel = self._rel(dep.__code__.co_filename)
            if dep_rel is not None:
                self.helpers.add((dep_rel, dep.__name__))

    def cuda(self, path: str, name: str) -> None:
        rel = self._rel(path)
        if rel is not None:
            self.kernels.add((rel, name, "cuda"))

    def files(self) -> list[str]:
        return sorted({k[0] for k in self.kernels} | {h[0] for h in self.helpers})

    def to_json(self) -> dict[str, object]:
        return {"kernels": [{"file": f, "name": n, "language": lang} for f, n, lang in sorted(self.kernels)],
                "helpers": [{"file": f, "name": n} for f, n in sorted(self.helpers)],
                "files": self.files()}


def _python_function(jitfn: object) -> Any:  # the function (FunctionType), or None
    """The decorated Python function behind a Triton kernel object (autotuners and heuristics
    wrap a JITFunction; each has ``fn``)."""
    fn = jitfn
    for _ in range(8):
        inner = getattr(fn, "fn", None)
        if inner is None:
            break
        fn = inner
    return fn if hasattr(fn, "__code__") else None


def _is_jit(obj: object) -> bool:
    return type(obj).__name__ in ("JITFunction", "InterpretedFunction") and hasattr(obj, "fn")


def _jit_dependencies(fn: FunctionType) -> list[FunctionType]:
    """``@triton.jit`` functions a kernel calls, transitively, resolved through its globals
    (``helper(...)`` and ``module.helper(...)`` alike)."""
    found: dict[int, FunctionType] = {}
    todo = [fn]
    while todo:
        cur = todo.pop()
        names = cur.__code__.co_names
        glb = getattr(cur, "__globals__", {})
        for name in names:
            obj = glb.get(name)
            cands = [obj] if _is_jit(obj) else []
            if obj is not None and type(obj).__name__ == "module":
                cands += [a for a in (getattr(obj, n, None) for n in names) if _is_jit(a)]
            for c in cands:
                inner = _python_function(c)
                if inner is not None and id(inner) not in found and inner is not fn:
                    found[id(inner)] = inner
                    todo.append(inner)
    return list(found.values())


# --- hooks -----------------------------------------------------------------------------------

def _record_triton(jitfn: object) -> None:
    for rec in _active:
        rec.triton(jitfn)


def record_cuda(path: str, name: str) -> None:
    """Called by ``gg.cuda`` kernels as they launch (``path``: the source file, absolute)."""
    for rec in _active:
        rec.cuda(path, name)


_PATCHED: list[tuple[type, Callable[..., object]]] = []


def ensure_hooked() -> None:
    """Wrap ``run`` of Triton's kernel classes, once per process (compiled and interpreted),
    if Triton is loaded. Called as recording starts and again after the spec is imported,
    so a process that never imports Triton does not pay for importing it."""
    if "triton" not in sys.modules:
        return
    with _LOCK:
        _patch_triton()


def _patch_triton() -> None:
    done = {cls for cls, _ in _PATCHED}
    classes = []
    with contextlib.suppress(Exception):
        from triton.runtime.jit import JITFunction

        classes.append(JITFunction)
    with contextlib.suppress(Exception):
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    for cls in classes:
        if cls in done:
            continue
        original = cls.run

        def run(self: object, *args: object, __original: Callable[..., object] = original,
                **kwargs: object) -> object:
            if _active:
                _record_triton(self)
            return __original(self, *args, **kwargs)

        cls.run = run
        _PATCHED.append((cls, original))
        compile_fn = getattr(cls, "_do_compile", None)
        if compile_fn is not None:
            def timed(self: object, *args: object, __original: Callable[..., object] = compile_fn,
                      **kwargs: object) -> object:
                start = time.monotonic()
                try:
                    return __original(self, *args, **kwargs)
                finally:
                    _COMPILE[0] += time.monotonic() - start

            cls._do_compile = timed


def compile_seconds() -> float:
    """Time this process spent compiling Triton kernels (a new specialization's first launch), for
    the job's timing report."""
    return _COMPILE[0]


@contextlib.contextmanager
def recording(repo_root: Path) -> Iterator[Recorder]:
    """Record the launches made inside the block."""
    rec = Recorder(repo_root)
    ensure_hooked()
    with _LOCK:
        _active.append(rec)
    try:
        yield rec
    finally:
        with _LOCK:
            _active.remove(rec)
