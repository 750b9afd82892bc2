"""One compile per kernel between a worker and its compiling sibling (see :mod:`.ahead`).

The sibling compiles the cases' Triton kernels ahead, on several threads, into the worker's own
Triton cache; the worker runs the cases. Where the worker reached a kernel that the sibling was
still compiling, both compiled it: the worker found nothing in the cache yet, and began again from
the start. On an H100 a second change's head worker spent 6 to 14 s compiling kernels that its
sibling was compiling at the same time, on the same cores.

A process that is about to compile a specialization (Triton's cache has no group for it) now
*claims* it first: it creates ``<claims>/<cache key>__<file>`` (exclusively; the file holds its
pid). A process that finds the claim taken does not compile: it waits for the group to appear in
the cache (the claimant's ``put_group``, after which the claim is removed), and compiles it itself
only where the claim is gone without a group (a compile that failed), the claimant is gone, or
``MAX_WAIT_S`` has passed. Triton's cache is keyed by content: what it then reads is the binary it
would have compiled.

Both processes are the same code under test, in the same sandbox and trust (the head's worker with
the head's sibling, the base's with the base's; each side has its own claims directory and cache),
and nothing here decides a verdict: at worst a claim left behind makes one compile wait, and the
wait is bounded. Claims live in the job's own directory, never in the Triton cache that is kept
between runs, so a stale one never outlives its job.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

MAX_WAIT_S = 30.0  # one compile waited for, at most (the claimant's compile is under way)
POLL_S = 0.01

_ARMED: list[Path] = []  # the claims directory, once armed
_LOCAL = threading.local()  # the claims this thread holds (released when its compile ends)
_LOCK = threading.Lock()
_PATCHED: list[tuple[Any, str, Any]] = []  # (class, attribute, original), for disarm
_STATS = {"claimed": 0, "waited": 0, "waited_s": 0.0, "gave_up": 0}


def arm(claims_dir: Path) -> bool:
    """From now on, this process claims what it compiles in ``claims_dir`` and waits for what
    another process claimed. Needs Triton imported; whether it is armed."""
    if _ARMED:
        return True
    if "triton" not in sys.modules:  # the code under test does not use Triton: nothing to claim
        return False
    try:
        from triton.runtime.cache import FileCacheManager
    except ImportError:
        return False
    claims_dir.mkdir(parents=True, exist_ok=True)
    _ARMED.append(claims_dir)
    _patch(FileCacheManager)
    with contextlib.suppress(ImportError):
        from triton.runtime.jit import JITFunction

        _release_after(JITFunction)
    return True


def disarm() -> None:
    """Triton as it was (for a process that goes on without its sibling: tests)."""
    for cls, name, original in reversed(_PATCHED):
        setattr(cls, name, original)
    _PATCHED.clear()
    _ARMED.clear()


def stats() -> dict[str, Any]:
    """How many compiles this process claimed, waited for (and how long), and stopped waiting for."""
    with _LOCK:
        return {**_STATS, "waited_s": round(_STATS["waited_s"], 2)}


def releasing(fn: Any) -> Any:
    """``fn`` (a compile run on a pool's thread), releasing the claims it took when it ends,
    whether or not it compiled (a failed compile's claim must not make the other process wait)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            release_mine()
    return run


class ReleasingPool:
    """An executor whose tasks release their claims when they end (``AsyncCompileMode`` submits
    each compile to it)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self.pool.submit(releasing(fn), *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


def release_mine() -> None:
    held: list[Path] = getattr(_LOCAL, "held", [])
    while held:
        with contextlib.suppress(OSError):
            held.pop().unlink()


def _claim_path(manager: Any, filename: str) -> Path | None:
    if not _ARMED or not getattr(manager, "_gg_plain", False) or not filename.endswith(".json"):
        return None
    cache_dir = getattr(manager, "cache_dir", None)
    if not cache_dir:
        return None
    return _ARMED[0] / f"{os.path.basename(str(cache_dir))}__{filename}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _holder(claim: Path) -> int | None:
    try:
        return int(claim.read_text().strip() or "0") or None
    except (OSError, ValueError):
        return None


def _patch(cls: Any) -> None:
    init, get_group, put_group = cls.__init__, cls.get_group, cls.put_group
    _PATCHED.extend([(cls, "__init__", init), (cls, "get_group", get_group), (cls, "put_group", put_group)])

    def __init__(self: Any, key: Any, *args: Any, **kwargs: Any) -> None:
        init(self, key, *args, **kwargs)
        # the cache itself, not Triton's override or dump directories
        self._gg_plain = not args and not kwargs.get("override") and not kwargs.get("dump")

    def claimed_get_group(self: Any, filename: str) -> Any:
        found = get_group(self, filename)
        claim = _claim_path(self, filename) if found is None else None
        if claim is None:
            return found
        return _claim_or_wait(self, filename, claim, get_group)

    def releasing_put_group(self: Any, filename: str, group: Any) -> Any:
        try:
            return put_group(self, filename, group)
        finally:
            claim = _claim_path(self, filename)
            if claim is not None:
                held: list[Path] = getattr(_LOCAL, "held", [])
                if claim in held:
                    held.remove(claim)
                with contextlib.suppress(OSError):
                    claim.unlink()

    cls.__init__, cls.get_group, cls.put_group = __init__, claimed_get_group, releasing_put_group


def _claim_or_wait(manager: Any, filename: str, claim: Path, get_group: Any) -> Any:
    """None (compile it: this thread now holds the claim) or the group another process compiled."""
    start = time.monotonic()
    waited = False
    while True:
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pass
        except OSError:
            return None  # claims cannot be written here: compile, as without them
        else:
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            if not hasattr(_LOCAL, "held"):
                _LOCAL.held = []
            _LOCAL.held.append(claim)
            _count(claimed=1, waited=int(waited), waited_s=time.monotonic() - start if waited else 0.0)
            # the claimant may have written the group between our look and our claim
            found = get_group(manager, filename)
            if found is not None:
                _LOCAL.held.remove(claim)
                with contextlib.suppress(OSError):
                    claim.unlink()
            return found
        # another thread or process is compiling it: wait for its group
        waited = True
        while claim.exists():
            found = get_group(manager, filename)
            if found is not None:
                _count(waited=1, waited_s=time.monotonic() - start)
                return found
            holder = _holder(claim)
            if holder is not None and not _alive(holder):
                with contextlib.suppress(OSError):
                    claim.unlink()  # its claimant died mid-compile: claim it anew
                break
            if time.monotonic() - start > MAX_WAIT_S:
                _count(gave_up=1, waited_s=time.monotonic() - start)
                return None  # compile it beside the claimant, unclaimed
            time.sleep(POLL_S)
        found = get_group(manager, filename)
        if found is not None:  # written as the claim went
            _count(waited=1, waited_s=time.monotonic() - start)
            return found
        # the claim went without a group (its compile failed, or its claimant died): claim it


def _count(**deltas: float) -> None:
    with _LOCK:
        for k, v in deltas.items():
            _STATS[k] += v  # type: ignore[assignment]


def _release_after(cls: Any) -> None:
    """A synchronous compile (``JITFunction._do_compile``) releases, when it ends, any claim its
    thread took, compiled or not."""
    compile_fn = getattr(cls, "_do_compile", None)
    if compile_fn is None:
        return
    _PATCHED.append((cls, "_do_compile", compile_fn))

    def _do_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return compile_fn(self, *args, **kwargs)
        finally:
            release_mine()

    cls._do_compile = _do_compile
