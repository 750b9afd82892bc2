"""How a worker's host thread waits for its GPU: by sleeping until the driver wakes it, not by spinning.

CUDA's default (``CU_CTX_SCHED_AUTO``) spins whenever a process has fewer contexts than the machine
has cores, which is always true of a worker: each waiting worker holds a core at 100%. One gate runs
two or three workers per job and up to ``jobs_per_gpu`` jobs per GPU; on a runner with several GPUs
that is more spinning threads than cores, and the jobs that have host work to do (a judge comparing,
a worker importing a library or compiling) queue behind threads that are only waiting. With
``blocking``, a wait costs a wake-up (microseconds) and no core.

The mode is set on each visible device's primary context through the driver, before torch creates
the context (torch and CuPy use the primary context). Timings are unaffected: the speed check times
the GPU with events, and a spin on the GPU holds the stream before each timed call (see
:mod:`.timing`). It is a setting of the gate's own process, not a check: the code under test may
change it, and gains nothing by it.
"""
from __future__ import annotations

import ctypes

# CUctx_flags' scheduling bits (cuda.h)
MODES = {"auto": 0x0, "spin": 0x1, "yield": 0x2, "blocking": 0x4}


def set_mode(mode: str, library: str = "libcuda.so.1") -> str | None:
    """Put every visible device's primary context in ``mode``. None when done, else why not (no
    driver, no device, a driver error): the worker then runs with CUDA's default, as before."""
    flag = MODES.get(mode)
    if flag is None:
        return f"unknown CUDA sync mode {mode!r} (one of {', '.join(MODES)})"
    try:
        cuda = ctypes.CDLL(library)
    except OSError as exc:
        return f"no CUDA driver ({exc})"
    count = ctypes.c_int(0)
    if (err := cuda.cuInit(0)) != 0:
        return f"cuInit failed (CUresult {err})"
    if (err := cuda.cuDeviceGetCount(ctypes.byref(count))) != 0:
        return f"cuDeviceGetCount failed (CUresult {err})"
    for ordinal in range(count.value):
        dev = ctypes.c_int(0)
        if (err := cuda.cuDeviceGet(ctypes.byref(dev), ordinal)) != 0:
            return f"cuDeviceGet({ordinal}) failed (CUresult {err})"
        # the _v2 entry point (CUDA 11+) also applies to a context that is already active
        setter = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
        if (err := setter(dev, ctypes.c_uint(flag))) != 0:
            return f"cuDevicePrimaryCtxSetFlags({ordinal}) failed (CUresult {err})"
    return None


def mode_of(library: str = "libcuda.so.1") -> str | None:
    """The scheduling mode of device 0's primary context (for tests and reports), None if unknown."""
    try:
        cuda = ctypes.CDLL(library)
    except OSError:
        return None
    dev, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0:
        return None
    if cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) != 0:
        return None
    sched = flags.value & 0x7
    return next((name for name, bit in MODES.items() if bit == sched), f"0x{sched:x}")
