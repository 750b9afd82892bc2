"""No absolute path of the machine that ran the checks in any report.

What the jobs return names files where the runner keeps them: the checkout, a temporary work tree,
the venv that holds Triton (a warning's ``.../site-packages/triton/knobs.py:504``), a job's own
directory. A reviewer needs none of it, and it tells a reader of a public pull request how the
runner is laid out. So before the verdict and the reports, every string of the run record is
rewritten: a path in the repository (or a work tree of it) becomes repository-relative, the base's
work tree ``<base>/``, gpu-gate's own package ``<gpu-gate>/``, the runner's Python
``<site-packages>/`` or ``<python>/``, the temporary
directory ``<tmp>/``, the home directory ``~/``, and any other absolute path ``<path>/`` with its
last component kept. The kernel interfaces (``/dev``, ``/proc``, ``/sys``) name no layout and stay.
"""
from __future__ import annotations

import os
import re
import site
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..record import RunRecord

# An absolute path of two or more components, where one starts: after a space, a quote, a bracket,
# "=", ":" or a line start, never inside a word, a URL ("https://host/...") or a relative path.
_ABSOLUTE = re.compile(r"(?<![\w.~<>/\\-])/(?!(?:dev|proc|sys)/)(?:[\w.+@~-]+/)+[\w.+@~-]*")
_SYSTEM_PREFIXES = {"/", "/usr", "/usr/local"}  # an interpreter installed here is the system's: <python> says too much


class Scrubber:
    """Rewrites absolute paths in text: known roots first, longest first, then any other."""

    def __init__(self, roots: Mapping[str, str]) -> None:
        # root -> placeholder ("" for repository-relative)
        self.roots = sorted(((r.rstrip("/"), p) for r, p in roots.items() if r and r != "/"),
                            key=lambda rp: -len(rp[0]))

    def text(self, value: str) -> str:
        for root, placeholder in self.roots:
            if root in value:
                # the root itself, not a longer name that starts with it ("/x/repo2"), nor the tail of another path
                value = re.sub(rf"(?<![\w.-]){re.escape(root)}(?=/|(?![\w.-]))(/?)", _replacer(placeholder), value)
        return _ABSOLUTE.sub(_unknown, value)

    def data(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        return value


def _replacer(placeholder: str) -> Callable[[re.Match[str]], str]:
    def replace(m: re.Match[str]) -> str:
        slash = m.group(1)
        if placeholder:
            return placeholder + slash
        return "" if slash else "."  # repository-relative; the root itself is "."
    return replace


def _unknown(match: re.Match[str]) -> str:
    last = match.group(0).rstrip("/").rsplit("/", 1)[-1]
    return f"<path>/{last}"


def runner_roots(repo_trees: Iterable[Path | None] = (), base_tree: Path | None = None,
                 env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every directory of this machine a report may name, with what it becomes."""
    env = os.environ if env is None else env
    roots: dict[str, str] = {}

    def add(path: str | Path | None, placeholder: str) -> None:
        if not path:
            return
        for form in {str(path), os.path.realpath(path)}:
            roots.setdefault(form.rstrip("/") or "/", placeholder)

    for tree in repo_trees:
        add(tree, "")
    add(env.get("GITHUB_WORKSPACE"), "")
    add(base_tree, "<base>")
    add(Path(__file__).resolve().parent.parent, "<gpu-gate>")  # gpu-gate's own modules in a traceback
    for directory in _site_dirs():
        add(directory, "<site-packages>")
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        if os.path.realpath(prefix) not in _SYSTEM_PREFIXES:
            add(prefix, "<python>")
    add(env.get("RUNNER_TEMP"), "<runner-temp>")
    add(env.get("RUNNER_TOOL_CACHE"), "<tool-cache>")
    add(tempfile.gettempdir(), "<tmp>")
    add(str(Path.home()), "~")
    return roots


def _site_dirs() -> list[str]:
    found = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    try:
        found += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # a virtualenv's site module without them
        pass
    return found


def scrub_record(record: RunRecord, roots: Mapping[str, str]) -> RunRecord:
    """A copy of ``record`` whose every string names no absolute path of this machine."""
    return RunRecord.from_json(Scrubber(roots).data(record.to_json()))
