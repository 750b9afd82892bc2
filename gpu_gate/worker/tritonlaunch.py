"""Which Triton specializations a process actually launches: kernel file, function name,
constexpr values and argument types, recorded where Triton launches a kernel.

    with tritonlaunch.recording() as rec:
        run_the_cases()
    for launch in rec.launches:        # one per distinct specialization, in order of first launch
        launch.function, launch.constexprs, launch.signature, launch.count

Real kernels pick their constexprs at the call site (``BLOCK=triton.next_power_of_2(n)``),
so no value is written anywhere a compile check could read statically: the launches are
where they are known. The hook wraps ``JITFunction.run`` (a compiled launch; autotuned and
heuristics-wrapped kernels end there too, with their chosen config) and, under
``TRITON_INTERPRET=1``, ``InterpretedFunction.run``. Only launches that returned are kept.
Recording nests: the hook is installed by the outermost recording and removed with it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol, Union, cast

if TYPE_CHECKING:
    from ..protocol.wire import Json
    from .tritonc import JitFunction

    class _Launching(Protocol):  # JITFunction, InterpretedFunction
        run: ClassVar[Callable[..., object]]

# torch dtype name -> Triton's signature type for a pointer to it
POINTER_TYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
                 "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "int64": "i64", "int32": "i32",
                 "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}
Plain = Union[bool, int, float, str, None]  # a constexpr value as JSON data
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # launch options that change the compiled code


@dataclasses.dataclass
class Launch:
    file: str  # the kernel's source file, as Python reports it
    function: str
    constexprs: dict[str, Plain]
    signature: dict[str, str]  # non-constexpr arguments: "*fp32", "i32", "fp32", ...
    options: dict[str, object]  # ints
    # the JITFunction, to compile it again
    fn: JitFunction | None = dataclasses.field(default=None, repr=False, compare=False)
    count: int = 1
    # the constexprs as the call passed them (a tl.dtype stays one), to compile it again; never sent
    values: dict[str, object] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def compile_constexprs(self) -> dict[str, object]:
        """The constexprs to compile this specialization with: the values the call passed where
        known (``constexprs`` has them as JSON text: ``X_dtype=tl.float32`` is ``"fp32"`` there,
        which Triton would take for a string)."""
        return {k: self.values.get(k, v) for k, v in self.constexprs.items()}

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.file, self.function, repr(sorted(self.constexprs.items())), repr(sorted(self.signature.items())),
                repr(sorted(self.options.items())))

    def to_json(self) -> dict[str, Json]:
        options = cast("dict[str, Json]", dict(self.options))  # ints (what Triton's launch options hold)
        return {"file": self.file, "function": self.function, "constexprs": dict(self.constexprs),
                "signature": dict(self.signature), "options": options, "count": self.count}


class Recorder:
    """The launches seen while recording, one per distinct specialization."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str, str, str, str], Launch] = {}
        self._lock = threading.Lock()

    @property
    def launches(self) -> list[Launch]:
        with self._lock:
            return list(self._by_key.values())

    def add(self, launch: Launch) -> None:
        with self._lock:
            seen = self._by_key.get(launch.key)
            if seen is None:
                self._by_key[launch.key] = launch
            else:
                seen.count += 1


_ACTIVE: list[Recorder] = []
_SAVED: dict[type[_Launching], Callable[..., object]] = {}  # class -> its original run


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Record every Triton launch in this process until the block ends."""
    rec = Recorder()
    start(rec)
    try:
        yield rec
    finally:
        stop(rec)


def start(rec: Recorder) -> None:
    if not _ACTIVE:
        _install()
    _ACTIVE.append(rec)


def stop(rec: Recorder) -> None:
    if rec in _ACTIVE:
        _ACTIVE.remove(rec)
    if not _ACTIVE:
        _uninstall()


def _launch_classes() -> list[type[_Launching]]:
    found = []
    try:
        from triton.runtime.jit import JITFunction

        found.append(JITFunction)
    except ImportError:
        return []
    try:
        from triton.runtime.interpreter import InterpretedFunction

        found.append(InterpretedFunction)
    except ImportError:
        pass
    return found


def _install() -> None:
    for cls in _launch_classes():
        if cls in _SAVED:
            continue
        original = cls.run
        _SAVED[cls] = original

        def run(self: object, *args: object, __original: Callable[..., object] = original,
                **kwargs: object) -> object:
            result = __original(self, *args, **kwargs)
            if _ACTIVE and not kwargs.get("warmup"):
                launch = describe(self, args, kwargs)
                if launch is not None:
                    for rec in list(_ACTIVE):
                        rec.add(dataclasses.replace(launch))
            return result

        cls.run = run


def _uninstall() -> None:
    for cls, original in list(_SAVED.items()):
        cls.run = original
        del _SAVED[cls]


def describe(kernel: object, args: tuple[object, ...], kwargs: Mapping[str, object]) -> Launch | None:
    """The specialization of one launch; None when the arguments cannot be read (then the
    launch is simply not listed: recording never breaks a launch)."""
    fn = getattr(kernel, "fn", None)
    code = getattr(fn, "__code__", None)
    if fn is None or code is None:
        return None
    try:
        sig = inspect.signature(fn)
        bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in sig.parameters})
        bound.apply_defaults()
    except (TypeError, ValueError):
        return None
    constexprs: dict[str, Plain] = {}
    values: dict[str, object] = {}
    signature: dict[str, str] = {}
    for name, param in sig.parameters.items():
        if name not in bound.arguments:
            continue
        value = bound.arguments[name]
        if _is_constexpr(param.annotation) or value is None:
            constexprs[name] = _plain(value)
            values[name] = value
        else:
            signature[name] = arg_type(value)
    options = {k: kwargs[k] for k in OPTIONS if isinstance(kwargs.get(k), int)}
    return Launch(code.co_filename, fn.__name__, constexprs, signature, options, fn=_jit_function(kernel),
                  values=values)


def _is_constexpr(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return "constexpr" in str(text)


def _jit_function(kernel: object) -> JitFunction | None:
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None
    return kernel if isinstance(kernel, JITFunction) else None


def _plain(value: object) -> Plain:
    """A constexpr value as JSON data (tl.dtype and other objects by their text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    inner = getattr(value, "value", None)  # tl.constexpr(4)
    if isinstance(inner, (bool, int, float, str)):
        return inner
    return str(value)


def arg_type(value: object) -> str:
    """Triton's signature type of a runtime argument, as triton.compile spells it."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "data_ptr"):
        return "*" + POINTER_TYPES.get(str(dtype).replace("torch.", ""), "fp32")
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return "*fp32"
