"""Where the command line's words go, and how many of them.

Three levels: quiet (the verdict line and errors only), normal, verbose (the detail a run already
has: every finding of every job, whole messages). Human text goes to stdout, or to stderr when
stdout carries JSON (``--format json``), so that ``gpu-gate check --format json | jq`` reads one
object. Errors always go to stderr. The state is set once per command by :func:`configure`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Literal, TextIO

ColorMode = Literal["auto", "always", "never"]


class Level(enum.IntEnum):
    QUIET = 0
    NORMAL = 1
    VERBOSE = 2


@dataclasses.dataclass
class _State:
    level: Level = Level.NORMAL
    human_to_stderr: bool = False  # stdout carries the JSON answer
    colour: bool = False


_STATE = _State()


def configure(level: Level, *, json_stdout: bool, colour: ColorMode) -> None:
    _STATE.level = level
    _STATE.human_to_stderr = json_stdout
    _STATE.colour = use_colour(colour, human_stream(), os.environ)


@contextlib.contextmanager
def session(level: Level, *, json_stdout: bool, colour: ColorMode) -> Iterator[None]:
    """One command's settings, put back as they were afterwards (``demo`` runs ``check`` inside itself)."""
    saved = dataclasses.replace(_STATE)
    configure(level, json_stdout=json_stdout, colour=colour)
    try:
        yield
    finally:
        _STATE.level, _STATE.human_to_stderr, _STATE.colour = saved.level, saved.human_to_stderr, saved.colour


def use_colour(mode: ColorMode, stream: TextIO, env: Mapping[str, str]) -> bool:
    """``--color always|never`` decide; ``auto`` colours a terminal, except under GitHub Actions,
    with NO_COLOR set to anything but "" (no-color.org), or with TERM=dumb."""
    if mode != "auto":
        return mode == "always"
    if env.get("NO_COLOR") or env.get("GITHUB_ACTIONS") == "true" or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def human_stream() -> TextIO:
    return sys.stderr if _STATE.human_to_stderr else sys.stdout


def colour() -> bool:
    return _STATE.colour


def level() -> Level:
    return _STATE.level


def verbose() -> bool:
    return _STATE.level >= Level.VERBOSE


def quiet() -> bool:
    return _STATE.level <= Level.QUIET


def say(msg: str = "") -> None:
    """Normal output: progress and listings; not shown with -q."""
    if not quiet():
        print(msg, file=human_stream(), flush=True)


def detail(msg: str = "") -> None:
    """Shown with -v only."""
    if verbose():
        print(msg, file=human_stream(), flush=True)


def verdict(msg: str) -> None:
    """The one line a command ends with (the verdict); shown even with -q."""
    print(msg, file=human_stream(), flush=True)


def warn(msg: str) -> None:
    """A warning on stderr; not shown with -q."""
    if not quiet():
        print(msg, file=sys.stderr, flush=True)


def error(msg: str) -> None:
    """An error on stderr, at every level."""
    print(msg, file=sys.stderr, flush=True)


def data(text: str) -> None:
    """The machine-readable answer on stdout, at every level."""
    print(text, file=sys.stdout, flush=True)
