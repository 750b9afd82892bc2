"""A worker's C heap, made to serve large allocations the same way whatever the process did before.

glibc's malloc adapts its thresholds to what a process has done: a large block is first mapped
afresh (``mmap``) and, once one has been freed, served from the heap; freed memory at the heap's top
is given back to the system (and faulted in again, zeroed, on the next use) or kept, depending on
where the last small block happens to lie. Two processes running the same code can so end up
paying page faults on every call or on none: on the CPU, a 1M-row sum faults in 16 MiB on each call
in one history and nothing in another, with every other step the same. The speed check compares the
base's worker with the head's, whose histories differ (what they imported, in what order), and
timed such a call at 10x in one worker against the other.

Fixed thresholds end the adaptation: blocks up to 32 MiB come from the heap, and freed memory is
kept (up to 1 GiB), so after the warm-up runs neither worker faults on a call that fits. Larger
blocks are mapped afresh in both alike. Set once, at the worker's start, through ``mallopt`` (no
environment variable that a program could read); elsewhere than glibc nothing is done.
"""
from __future__ import annotations

import ctypes

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for the adaptive threshold on 64-bit
TRIM_THRESHOLD = 1 << 30


def steady() -> str | None:
    """Fix the thresholds; None when done, else why not (not glibc, or it refused)."""
    try:
        # the C library this process already runs on: no search (find_library starts ldconfig or a
        # compiler, in every worker)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError) as exc:
        return f"no mallopt ({exc})"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt returns 1 on success
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "mallopt refused the thresholds"
    return None
