"""compute-sanitizer: find it, build its command line, read its XML.

Option syntax (compute-sanitizer 2025.x and later, ``--help``):

- ``--kernel-name kns=SUBSTRING`` selects kernels whose *mangled* name contains
  SUBSTRING; ``kne=`` wants the complete mangled name; ``regex=`` a regex. The
  option may be repeated and the filters add up (a kernel matching any one is
  checked), but the comma-separated pairs *inside one option* must all match. So
  each kernel under test gets its own ``--kernel-name kns=<base name>``: the base
  name of a C++ kernel is a substring of its mangled name (``_Z7epsilonPi``).
- ``--error-exitcode N``: without it a run with errors exits 0.
- ``--xml --save FILE``: structured records, one ``<record>`` per report.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree

from .. import proc
from .nvcc import toolkit_candidates

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
ERROR_EXITCODE = 86
_VERSION = re.compile(r"Version\s+(\d+(?:\.\d+)+)")
_NEAREST = re.compile(r"(\d[\d,]*) bytes (before|after|inside)[^.\n]*?nearest allocation(?: at (0x[0-9a-fA-F]+))?"
                      r"(?: of size ([\d,]+) bytes)?")


@dataclasses.dataclass(frozen=True)
class Sanitizer:
    path: str
    version: str | None  # "2025.3.1"; None when ``--version`` printed nothing we could read
    options: frozenset[str] = frozenset()  # long options listed by ``--help``

    def supports(self, option: str) -> bool:
        return option in self.options

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".")) if self.version else ()


def parse_version(text: str) -> str | None:
    m = _VERSION.search(text)
    return m.group(1) if m else None


def candidates(policy_path: str | None) -> list[Path]:
    """Where compute-sanitizer is looked for, in order."""
    out: list[Path] = []
    if policy_path:
        out.append(Path(policy_path))
    out += toolkit_candidates("compute-sanitizer")
    out += _wheel_candidates()
    return out


def _wheel_candidates() -> list[Path]:
    """The ``nvidia-cuda-sanitizer-api`` wheel: ``nvidia/cu13/bin/compute-sanitizer`` in site-packages."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    out = []
    for root in spec.submodule_search_locations:
        out += sorted(Path(root).glob("cu*/bin/compute-sanitizer"), reverse=True)
        out += sorted(Path(root).glob("cuda_sanitizer_api/compute-sanitizer/compute-sanitizer"))
    return out


def locate(policy_path: str | None = None) -> Sanitizer | None:
    """The first compute-sanitizer that runs ``--version``; None when there is none.

    A policy path that does not work is not silently replaced by another one.
    """
    paths = [Path(policy_path)] if policy_path else candidates(None)
    for path in paths:
        if not (path.is_file() and os.access(path, os.X_OK)):
            continue
        res = proc.run([str(path), "--version"], timeout=60)
        if res.ok:
            helped = proc.run([str(path), "--help"], timeout=60)
            return Sanitizer(str(path), parse_version(res.stdout + res.stderr), parse_options(helped.stdout))
    return None


def parse_options(help_text: str) -> frozenset[str]:
    """The long options a compute-sanitizer's ``--help`` lists (they differ between releases)."""
    return frozenset(re.findall(r"(?m)^\s+(?:-\w \[ )?(--[\w-]+)", help_text))


def sanitizer_env(tool: str) -> dict[str, str]:
    """Environment the wrapped worker gets (the contract with ``gpu_gate.judge.job``).

    - ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: torch allocates each tensor with its
      own cudaMalloc, so a tail overrun leaves the allocation and memcheck sees it.

    The worker learns that it runs under the tool from its job file, not from a variable a
    kernel could read.
    """
    return {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}


@dataclasses.dataclass(frozen=True)
class Options:
    tool: str
    xml_path: str
    kernels: tuple[str, ...] = ()  # base names; one --kernel-name kns= each
    # initcheck only: count writes by kernels outside the filter as initialisation. Releases
    # without this option report buffers filled by torch's own kernels as uninitialised, so
    # there initcheck runs unfiltered and the records are filtered afterwards.
    track_filtered: bool | None = None
    print_limit: int = 100
    launch_timeout: int = 60
    leak_check: bool = False  # memcheck only
    racecheck_report: str = "analysis"  # racecheck only: analysis | hazard | all
    extra: tuple[str, ...] = ()


def argv(sanitizer: str, opts: Options, inner: Sequence[str]) -> list[str]:
    """The full command line: compute-sanitizer's options, then the wrapped program."""
    if opts.tool not in TOOLS:
        raise ValueError(f"unknown compute-sanitizer tool {opts.tool!r} (expected one of {', '.join(TOOLS)})")
    out = [
        sanitizer, "--tool", opts.tool,
        "--error-exitcode", str(ERROR_EXITCODE),
        "--xml", "--save", opts.xml_path,
        "--print-limit", str(opts.print_limit),
        "--launch-timeout", str(opts.launch_timeout),
        "--target-processes", "all",
        # The worker reports its own failures; a nonzero exit of the application must
        # not be counted as a sanitizer error (it would share the error exit code).
        "--check-exit-code", "no",
        # A process that never used CUDA checked nothing: that must fail.
        "--require-cuda-init", "yes",
        # Keep going after a precise error, so later cases are still checked.
        "--destroy-on-device-error", "kernel",
        # Host backtraces of a Python process are slow to symbolise and say little.
        "--show-backtrace", "device",
    ]
    if opts.tool == "memcheck" and opts.leak_check:
        out += ["--leak-check", "full"]
    if opts.tool == "racecheck":
        out += ["--racecheck-report", opts.racecheck_report]
    if opts.tool == "initcheck" and opts.track_filtered:
        out += ["--initcheck-track-filtered-global-memory", "yes"]
    if opts.tool != "initcheck" or opts.track_filtered:
        for name in opts.kernels:
            out += ["--kernel-name", f"kns={name}"]
    return [*out, *opts.extra, *inner]


# --- XML --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Record:
    """One ``<record>`` of compute-sanitizer's XML, flattened."""

    record_kind: str  # <kind>: Precise, Imprecise, Analysis, Hazard, Api, Initcheck, ...
    level: str  # Error, Warning, Info
    text: str
    kernel: str | None = None
    file: str | None = None
    line: int | None = None
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    address: str | None = None
    size: int | None = None
    count: int = 1
    allocation: str | None = None  # "1 bytes after the nearest allocation ... of size 4,000 bytes"
    extra: tuple[tuple[str, str], ...] = ()


class XmlError(Exception):
    pass


def parse_xml(text: str) -> list[Record]:
    """Records from a ``--xml --save`` file. Raises :class:`XmlError` when it is not that format."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise XmlError(f"not well-formed XML: {exc}") from None
    if root.tag != "ComputeSanitizerOutput":
        raise XmlError(f"unexpected root element <{root.tag}>")
    return [_record(el) for el in root.iter("record")]


def _record(el: ElementTree.Element) -> Record:
    what = el.find("what")
    text = _text(what, "text") or _text(el, "text") or ""
    detail = _text(what, "type")
    if detail and detail not in text:
        text = f"{text}: {detail}"
    frame = _first_frame(el)
    extra = []
    for role in ("source", "destination"):
        side = what.find(role) if what is not None else None
        if side is not None:
            extra.append((role, _describe_side(side)))
    return Record(
        record_kind=_text(el, "kind") or "",
        level=_text(el, "level") or "Error",
        text=" ".join(text.split()),
        kernel=_text(frame, "func") if frame is not None else None,
        file=_frame_file(frame),
        line=_int(_text(frame, "line")) if frame is not None else None,
        thread=_dim3(el.find("who/threadIdx")),
        block=_dim3(el.find("who/blockIdx")),
        address=_first_text(el, ("what/address", "what/accessAddress", "address", "accessAddress")),
        size=_int(_first_text(el, ("what/size", "what/accessSize", "size", "accessSize"))),
        count=_int(_first_text(el, ("what/destination/count", "what/count", "count"))) or 1,
        allocation=_allocation(el),
        extra=tuple(extra),
    )


def _text(el: ElementTree.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    return found.text.strip() if found is not None and found.text else None


def _first_text(el: ElementTree.Element, paths: Sequence[str]) -> str | None:
    for path in paths:
        value = _text(el, path)
        if value:
            return value
    return None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.replace(",", ""), 0)
    except ValueError:
        return None


def _dim3(el: ElementTree.Element | None) -> tuple[int, int, int] | None:
    if el is None:
        return None
    return (_int(_text(el, "x")) or 0, _int(_text(el, "y")) or 0, _int(_text(el, "z")) or 0)


def _first_frame(el: ElementTree.Element) -> ElementTree.Element | None:
    """The innermost device location: ``where``, the device stack's top frame, or a race's source."""
    candidates = [el.find("where"), el.find("deviceStack/frame"), el.find("what/where"),
                  el.find("what/source/where"), el.find("what/destination/where")]
    present = [c for c in candidates if c is not None]
    with_line = [c for c in present if _text(c, "line")]
    best = with_line or present
    return best[0] if best else None


def _frame_file(frame: ElementTree.Element | None) -> str | None:
    if frame is None:
        return None
    path, file = _text(frame, "path"), _text(frame, "file")
    if path and file and not file.startswith("/"):
        return f"{path.rstrip('/')}/{file}"
    return file or path


def _describe_side(side: ElementTree.Element) -> str:
    direction = _text(side, "direction") or "?"
    where = side.find("where")
    func = _text(where, "func") if where is not None else None
    pc = _text(where, "pc") if where is not None else None
    line = _text(where, "line") if where is not None else None
    loc = f"{func}+{pc}" if func and pc else (func or "?")
    return f"{direction} at {loc}" + (f" (line {line})" if line else "")


def _allocation(el: ElementTree.Element) -> str | None:
    blob = " ".join(t.strip() for t in el.itertext() if t.strip())
    m = _NEAREST.search(blob)
    if m:
        return " ".join(m.group(0).split())
    near, size = _first_text(el, ("what/nearestAddress", "nearestAddress")), _first_text(el, ("what/nearestSize", "nearestSize"))
    addr = _first_text(el, ("what/address", "what/accessAddress"))
    a, n, s = _int(addr), _int(near), _int(size)
    if a is None or n is None or s is None:
        return None
    if a >= n + s:
        return f"{a - (n + s)} bytes after the nearest allocation at {near} of size {s:,} bytes"
    if a < n:
        return f"{n - a} bytes before the nearest allocation at {near} of size {s:,} bytes"
    return f"{a - n} bytes inside the allocation at {near} of size {s:,} bytes"
