"""In the head's worker (and its compiling sibling): Triton kernels that the base's worker compiled
in this very job, taken instead of compiled again.

A pull request usually leaves most of a spec's kernels as they are, and a Triton kernel's cache key
is a digest of its source, its specialization and the compiler: where the head's kernel is the
base's, both workers of a differential job compile the same binaries for the same cases, each on
the job's cores. The sandbox shows the head's worker the base's Triton cache, read-only, at a mount
point in its own directory; Triton's cache here looks there before it compiles, and copies what it
finds into the head's own cache. The base's sibling compiles the cases' kernels in the order of
the cases, the head's in reverse (see ``checks.equivalence``): between them every kernel the two
sides share is compiled once.

Trust: the base's code is the trusted side; its cache cannot be written from the head's sandbox,
and the base's worker never sees the head's (a head that could plant a binary in the base's cache
could make the base fail like the head, and its failures pass for debt). A kernel the head changed
has another key, and is compiled from the head's source as before.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_FROM: list[Path] = []  # the base's cache, where the head's worker sees it


def install(base_cache: Path) -> bool:
    """Have Triton's cache in this process look in ``base_cache`` before it compiles; whether it
    could (a Triton without a settable cache manager compiles as before)."""
    if not base_cache.is_dir():
        return False
    try:
        from triton import knobs
        from triton.runtime.cache import FileCacheManager
    except ImportError:
        return False
    _FROM[:] = [base_cache]

    class TakesTheBases(FileCacheManager):  # type: ignore[misc]
        """Triton's file cache, which takes a compiled kernel from the base's cache on a miss."""

        def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
            super().__init__(key, override=override, dump=dump)
            self.own = not override and not dump  # the compile cache, not Triton's override or dump

        def get_group(self, filename: str) -> dict[str, str] | None:
            got: dict[str, str] | None = super().get_group(filename)
            if got is not None or not self.own:
                return got
            return take(self, filename)

    try:
        knobs.cache.manager_class = TakesTheBases
    except (AttributeError, TypeError):
        return False
    return True


def take(cache: Any, filename: str) -> dict[str, str] | None:
    """The group ``filename`` of ``cache.key`` from the base's cache, copied into ``cache`` (its
    members renamed to where they are now); None where the base has not compiled it (yet)."""
    if not _FROM:
        return None
    entry = _FROM[0] / str(cache.key)
    try:
        data = json.loads((entry / f"__grp__{filename}").read_text())
        children = data["child_paths"]
        if not isinstance(children, dict) or not children:
            return None
        # each member by its file's name in the entry (the paths listed are where the base's worker wrote it)
        blobs = {str(name): (Path(str(path)).name, (entry / Path(str(path)).name).read_bytes())
                 for name, path in children.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not there, or being written: compiled here, as without it
    taken = {name: str(cache.put(blob, file, binary=True)) for name, (file, blob) in blobs.items()}
    cache.put_group(filename, taken)
    return taken
