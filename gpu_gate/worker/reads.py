"""Runs in the job process: which repository files the code under review opened or loaded.

A kernel's behaviour is not all in its source: a JSON tuning table (as vLLM's fused MoE
configs), a ``.so`` loaded through ``ctypes``, a ``.cubin`` or ``.ptx`` handed to the driver.
An audit hook (``sys.addaudithook``), installed in the candidate's worker before the spec is
imported, sees every ``open`` (``open()``, ``os.open``, ``io.open_code``: numpy, json and
pickle loads go through them) and every ``ctypes.dlopen``; the files under the repository root
are kept, relative to it. The worker reports them with its launches (see ``serve._finish``),
the gate keeps them with the recorded launches (:mod:`gpu_gate.coverage`): a later change to
such a file selects the spec, and the result cache checks their bytes (:mod:`gpu_gate.store.reads`).

Like the launch record, this is as honest as the process it runs in (an audit hook cannot be
removed, but the candidate can reach this module's set): it only ever adds files to judge.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

MAX_READS = 512  # files kept per job; more are counted, not named
_EVENTS = frozenset({"open", "ctypes.dlopen"})
_LOCK = threading.Lock()
_active: list[Recorder] = []
_HOOKED = [False]
_inside = threading.local()  # resolving a path must not record itself


class Recorder:
    """The repository files opened or loaded while it is active, relative to the root."""

    def __init__(self, repo_root: Path, ignore: Path | None = None) -> None:
        self.root = os.path.realpath(repo_root) + os.sep
        # the worker's own directory (its context, its caches), wherever the runner put it
        self.ignore = os.path.realpath(ignore) + os.sep if ignore is not None else None
        self.files: set[str] = set()
        self.dropped = 0

    def saw(self, path: object) -> None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or not path:
            return  # a file descriptor, or a library name the loader resolves (``libc.so.6``)
        full = os.path.realpath(path)
        if not full.startswith(self.root) or (self.ignore is not None and full.startswith(self.ignore)):
            return
        rel = full[len(self.root):].replace(os.sep, "/")
        if "__pycache__/" in rel or rel.startswith(".git/") or not os.path.isfile(full):
            return  # a file the call did not find (a library name the loader resolves elsewhere) was not read
        if rel in self.files:
            return
        if len(self.files) >= MAX_READS:
            self.dropped += 1
            return
        self.files.add(rel)

    def to_json(self) -> list[str]:
        return sorted(self.files)


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event not in _EVENTS or not _active or not args or getattr(_inside, "busy", False):
        return
    _inside.busy = True
    try:
        for rec in list(_active):
            try:
                rec.saw(args[0])
            except Exception:  # noqa: BLE001 - a path the OS cannot resolve is not a read of the repository
                pass
    finally:
        _inside.busy = False


def start(repo_root: Path, ignore: Path | None = None) -> Recorder:
    """Record from now on (the hook is added once per process and stays: audit hooks cannot be removed);
    ``ignore``: a directory whose files are never recorded (the worker's own)."""
    rec = Recorder(repo_root, ignore)
    with _LOCK:
        if not _HOOKED[0]:
            sys.addaudithook(_hook)
            _HOOKED[0] = True
        _active.append(rec)
    return rec


def stop(rec: Recorder) -> None:
    with _LOCK:
        if rec in _active:
            _active.remove(rec)
