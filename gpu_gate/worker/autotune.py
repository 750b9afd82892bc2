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

Whatever the mode, each call says which config each autotuned kernel ran for each key
(:func:`per_call`), and can be told to run given configs instead: the judge has the base's worker run
a case on the configs the head's ran there, where the two took different ones (a pull request that
drops a config from the list shifts every later turn, timing noise picks differently), so that a
failure is compared with the base's code on the same config. Only a config of the base's own list is
ever run that way (matched by its settings), for that call alone: the base's own turns, and the
configs its earlier calls settled on, are kept for its later calls.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

_TAKEN: list[str] = []  # kernels whose configs were taken in turn, in the order first seen
# kernel -> {key: config}, for the call under way (None outside a call); the configs asked for instead
_CALL: dict[str, dict[str, str]] | None = None
_PREFER: Mapping[str, Mapping[str, str]] = {}
MOST_KERNELS, MOST_KEYS = 32, 32  # what one call records: a kernel launched with more keys is not followed


def config_id(config: object) -> str:
    """A config as the judge names it across workers: its settings, as Triton writes them."""
    return str(config)


def key_id(key: object) -> str:
    """An autotuner key (sizes and dtypes) as the judge names it across workers."""
    return repr(key)


def kernel_name(tuner: object) -> str:
    fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
    return getattr(fn, "__name__", None) or "a Triton kernel"


class _Configs(dict):  # type: ignore[type-arg]
    """An autotuner's cache of the config settled on for each key, read as Triton reads it (``key in
    cache``, ``cache[key]``): each key's config is recorded for the call under way, and where the
    judge asks for a config for a key, that config (if the kernel's list has it) answers instead,
    without being kept."""

    def __init__(self, tuner: object, settled: dict) -> None:  # type: ignore[type-arg]
        super().__init__(settled)
        self.tuner = tuner

    def _asked(self, key: object) -> object | None:
        want = _PREFER.get(kernel_name(self.tuner), {}).get(key_id(key))
        if want is None:
            return None
        return next((c for c in getattr(self.tuner, "configs", ()) if config_id(c) == want), None)

    def __contains__(self, key: object) -> bool:
        return self._asked(key) is not None or super().__contains__(key)

    def __getitem__(self, key: object) -> object:
        config = self._asked(key)
        if config is None:
            config = super().__getitem__(key)
        if _CALL is not None:
            name = kernel_name(self.tuner)
            if name in _CALL or len(_CALL) < MOST_KERNELS:
                keys = _CALL.setdefault(name, {})
                if key_id(key) in keys or len(keys) < MOST_KEYS:
                    keys[key_id(key)] = config_id(config)
        return config


@contextlib.contextmanager
def per_call(asked: Mapping[str, Mapping[str, str]] | None = None) -> Iterator[dict[str, dict[str, str]]]:
    """Within one call: yields what it records (kernel -> {key: config}, for the kernels that have a
    choice of configs); ``asked``, the same form, names the configs to run instead, where the
    kernel's list has them."""
    global _CALL, _PREFER
    _CALL, _PREFER = {}, dict(asked or {})
    try:
        yield _CALL
    finally:
        _CALL, _PREFER = None, {}


def _follow() -> None:
    """Have every autotuner keep its settled configs in a :class:`_Configs`, from its next launch."""
    from triton.runtime.autotuner import Autotuner

    if getattr(Autotuner.run, "_gpu_gate_followed", False):
        return
    run = Autotuner.run

    def followed(self: object, *args: object, **kwargs: object) -> object:
        if not isinstance(getattr(self, "cache", None), _Configs):
            self.cache = _Configs(self, dict(getattr(self, "cache", None) or {}))  # type: ignore[attr-defined]
        return run(self, *args, **kwargs)

    followed._gpu_gate_followed = True  # type: ignore[attr-defined]
    Autotuner.run = followed


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def untimed() -> list[str]:
    """The kernels whose configs were taken in turn so far, in the order first seen."""
    return list(_TAKEN)


def take_in_turn(mode: str = "rotate") -> list[str]:
    """Patch the autotuner of the Triton that this process imports, once: its configs followed per
    call (always), and taken in turn unless ``mode`` is ``timed`` on a GPU; the list of kernels taken
    in turn so far (filled as they launch)."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return _TAKEN
    _follow()
    if mode == "timed" and not interpreting():
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
