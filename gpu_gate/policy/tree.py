"""Where policy files are read from: a directory on disk, one git revision, or gpu-gate's presets.

A policy and everything it extends stay inside one tree. A path that leaves it (an absolute path, `..`
past the root, a symbolic link pointing outside) is refused with a one-line error that names the path
and never shows what is there: a policy must not be a way to read `/etc/passwd` into a report.
"""
from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import Protocol

from ..errors import PolicyError

_LINK_HOPS = 8
_DRIVE = re.compile(r"^[A-Za-z]:")


class PolicyTree(Protocol):
    """A set of files addressed by repository-relative POSIX paths."""

    def read(self, rel: str) -> bytes:
        """The file's bytes; PolicyError when it is missing, a directory, or leads outside the tree."""
        ...

    def exists(self, rel: str) -> bool: ...

    def display(self, rel: str) -> str:
        """How errors name the file (the `path` of `path:line:col`)."""
        ...

    def key(self, rel: str) -> str:
        """The same for two names of one file (cycle detection)."""
        ...


def inside(rel_dir: str, value: str) -> str | None:
    """``value`` (as written in `extends:`) taken from the directory ``rel_dir``, or None when it leaves the tree."""
    text = value.replace("\\", "/")
    if text.startswith(("/", "~")) or _DRIVE.match(text):
        return None
    joined = posixpath.normpath(posixpath.join(rel_dir, text))
    if joined == ".." or joined.startswith("../") or joined == ".":
        return None
    return joined


def outside_error(at: str, what: str) -> PolicyError:
    return PolicyError(f"{at}: {what} is outside the repository",
                       "policy files must live in the repository: give a preset name or a path inside it")


class FileTree:
    """Files under ``root`` on disk; names are shown relative to ``shown_from`` when they lie inside it."""

    def __init__(self, root: Path, shown_from: Path | None = None) -> None:
        self.root = Path(os.path.abspath(root))
        self.shown_from = Path(os.path.abspath(shown_from or root))

    def _path(self, rel: str) -> Path:
        return self.root / rel

    def _check_inside(self, rel: str) -> Path:
        path = self._path(rel)
        real, top = os.path.realpath(path), os.path.realpath(self.root)
        if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
            raise PolicyError(f"{self.display(rel)}: is a symbolic link to a file outside the repository",
                              "policy files must live in the repository; copy the file in instead of linking it")
        return path

    def read(self, rel: str) -> bytes:
        path = self._check_inside(rel)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise PolicyError(f"{self.display(rel)}: file not found",
                              "check the path; with no policy file the default preset applies") from None
        except IsADirectoryError:
            raise PolicyError(f"{self.display(rel)}: is a directory, not a policy file",
                              "give the path of a YAML file") from None
        except OSError as err:
            raise PolicyError(f"{self.display(rel)}: cannot be read ({err.strerror or type(err).__name__})",
                              "check the path and its permissions") from None

    def exists(self, rel: str) -> bool:
        return self._path(rel).is_file() or self._path(rel).is_symlink()

    def display(self, rel: str) -> str:
        path = self._path(rel)
        try:
            return path.relative_to(self.shown_from).as_posix()
        except ValueError:
            return str(path)

    def key(self, rel: str) -> str:
        return os.path.realpath(self._path(rel))


class GitTree:
    """The files of one commit. Errors name a file as git does, `<rev>:<path>`."""

    def __init__(self, repo: Path, rev: str, label: str | None = None) -> None:
        self.repo = repo
        self.rev = rev
        self.label = rev[:12] if label is None else label  # "": name files as in the work tree

    def display(self, rel: str) -> str:
        return f"{self.label}:{rel}" if self.label else rel

    def key(self, rel: str) -> str:
        return f"{self.rev}:{rel}"

    def exists(self, rel: str) -> bool:
        return self._entry(rel) is not None

    def _entry(self, rel: str) -> tuple[str, str, str] | None:
        from .. import git

        return git.tree_entry(self.repo, self.rev, rel)  # a missing revision is a GitError: never "no policy"

    def read(self, rel: str) -> bytes:
        from .. import git

        current = rel
        for _ in range(_LINK_HOPS):
            entry = self._entry(current)
            if entry is None:
                raise PolicyError(f"{self.display(current)}: file not found",
                                  "paths in extends are relative to the file that extends them")
            mode, kind, oid = entry
            if kind != "blob":
                raise PolicyError(f"{self.display(current)}: is a directory, not a policy file",
                                  "give the path of a YAML file")
            blob = git.read_blobs(self.repo, [oid]).get(oid, b"")
            if mode != "120000":
                return blob
            target = inside(posixpath.dirname(current), os.fsdecode(blob))
            if target is None:
                raise outside_error(self.display(current), "the target of this symbolic link")
            current = target
        raise PolicyError(f"{self.display(rel)}: too many levels of symbolic links", "link the policy file directly")


class PresetTree:
    """gpu-gate's own presets, named like the `policies/` folder that ships them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def read(self, rel: str) -> bytes:
        return (self.directory / rel).read_bytes()

    def exists(self, rel: str) -> bool:
        return (self.directory / rel).is_file()

    def display(self, rel: str) -> str:
        return f"policies/{rel}"

    def key(self, rel: str) -> str:
        return f"preset:{rel}"
