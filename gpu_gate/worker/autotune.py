"""Autotuned Triton kernels in a worker that runs the repository's code: configs taken in turn,
untimed (the policy's ``autotune: rotate``, the default), or timed as in production (``timed``).

``@triton.autotune`` compiles and times every config before the first launch of each new key (its
``key`` arguments and the dtypes). A merge gate launches many keys on purpose: every fuzzed size is
one. Timed, each of them compiles every config: on an H100, mamba's chunked scan spent about 100 s
per case that way (three cases in five minutes), and FL2's rotary gate took five minutes. The
timing also decides *which* config a case runs, by the noise of a shared GPU, so the base's worker
and the head's could run different configs on the same case, and a config that is wrong at some
sizes (mamba #537: BLOCK_N larger than BLOCK_M) would be run only where it happens to win.

``rotate``: each new key of a kernel takes the next config of its (pruned) list, in order: the
cases of one job reach every config the kernel offers, the same way in the base's worker and the
head's (they run the same cases in the same order), and only that config is compiled and run. On a
GPU it runs once through the autotuner's own timing, hooks included, so that a config that does not
fit the GPU or does not compile is passed over as the autotuner passes it over (mamba's chunked
scan lists configs too large for some sizes); the turn then goes to the next config.

Without a GPU (Triton's interpreter) there is no driver to time with, and the autotuner raised
``RuntimeError: 0 active drivers`` before the kernel started: configs are taken in turn there
whatever the policy says.

The kernels whose configs were taken in turn are listed, for the job to say so.
"""
from __future__ import annotations

import os

_TAKEN: list[str] = []  # kernels whose configs were taken in turn, in the order first seen


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def untimed() -> list[str]:
    """The kernels whose configs were taken in turn so far, in the order first seen."""
    return list(_TAKEN)


def take_in_turn(mode: str = "rotate") -> list[str]:
    """Patch the autotuner of the Triton that this process imports, once, unless ``mode`` is
    ``timed`` on a GPU; the list of kernels taken in turn so far (filled as they launch)."""
    if mode == "timed" and not interpreting():
        return _TAKEN
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return _TAKEN
    if getattr(Autotuner._bench, "_gpu_gate_untimed", False):
        return _TAKEN
    prune, timed = Autotuner.prune_configs, Autotuner._bench

    def prune_configs(self: object, *args: object, **kwargs: object) -> object:
        # A new key: the autotuner prunes, then "times" each pruned config in list order.
        pruned = prune(self, *args, **kwargs)
        state = self.__dict__.setdefault("_gpu_gate_turn", {"keys": 0, "at": 0, "pick": 0})
        state["pick"] = state["keys"] % max(1, len(pruned))
        state["keys"] += 1
        state["at"] = 0
        return pruned

    def _bench(self: object, *args: object, config: object = None, **meta: object) -> list[float]:
        fn = getattr(self, "base_fn", None) or getattr(self, "fn", None)
        name = getattr(fn, "__name__", None) or "a Triton kernel"
        if name not in _TAKEN:
            _TAKEN.append(name)
        state = self.__dict__.setdefault("_gpu_gate_turn", {"keys": 0, "at": 0, "pick": 0})
        at = state["at"]
        state["at"] += 1
        if at != state["pick"]:
            return [1.0, 1.0, 1.0]  # the least wins: not this one
        if interpreting():
            return [0.0, 0.0, 0.0]
        # On a GPU the config whose turn it is runs as the autotuner would run it (its hooks, one
        # timing): a config that does not fit the GPU (shared memory, registers) or does not compile
        # scores inf there, as in production, and the turn passes to the next config of the list.
        score = timed(self, *args, config=config, **meta)
        if not all(isinstance(v, (int, float)) and v < float("inf") for v in score):
            state["pick"] += 1
            return [float("inf")] * 3
        return [0.0, 0.0, 0.0]

    _bench._gpu_gate_untimed = True  # type: ignore[attr-defined]
    Autotuner.prune_configs = prune_configs
    Autotuner._bench = _bench
    return _TAKEN
