"""Import a spec without running the repository's code: every module the spec imports from the
repository (its kernels, their wrappers, the package's ``__init__``) is replaced by an inert
stand-in. The spec's own file runs; what it imports from the repository is a name that can be
passed around but not called.

The reference worker imports specs this way, so that the code under review cannot reach the
process that computes the truth: a kernel module whose import patches ``torch.sum`` patches nothing
there. When the spec needs the repository's code to define itself or its reference (a constant
computed by a repository helper, a reference that calls one), the stand-in raises
:class:`RepositoryCode`, and the worker imports the spec for real instead, and says so.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Sequence
from typing import NoReturn


class RepositoryCode(Exception):
    """The spec used the repository's code where only a stand-in was imported."""


class Stub:
    """A name imported from the repository: attributes are stand-ins too, calling it raises."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_gg_name", name)

    def __getattr__(self, attr: str) -> Stub:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Stub(f"{object.__getattribute__(self, '_gg_name')}.{attr}")

    def __call__(self, *args: object, **kwargs: object) -> NoReturn:
        raise RepositoryCode(object.__getattribute__(self, "_gg_name"))

    def _use(self, *args: object, **kwargs: object) -> NoReturn:
        raise RepositoryCode(object.__getattribute__(self, "_gg_name"))

    __int__ = __float__ = __index__ = __bool__ = __iter__ = __len__ = __getitem__ = _use
    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = __truediv__ = __floordiv__ = _use
    __lt__ = __le__ = __gt__ = __ge__ = __mro_entries__ = _use

    def __repr__(self) -> str:
        return f"<repository code {object.__getattribute__(self, '_gg_name')}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Stub:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Stub(f"{self.__name__}.{attr}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = _StubModule(spec.name)
        mod.__path__ = []  # a package: its submodules come through the finder too
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class Finder(importlib.abc.MetaPathFinder):
    """Answers for every module that would be found under one of ``roots``, except ``keep``."""

    def __init__(self, roots: Sequence[str], keep: Sequence[str] = ()) -> None:
        self.roots = [os.path.realpath(r).rstrip(os.sep) + os.sep for r in roots]
        self.keep = set(keep)
        self.stubbed: list[str] = []

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if name in self.keep:
            return None
        parent = name.rpartition(".")[0]
        if parent and isinstance(sys.modules.get(parent), _StubModule):
            return self._stub(name)
        real = importlib.machinery.PathFinder.find_spec(name, path)
        origin = (real.origin or "") if real is not None else ""
        locations = list(real.submodule_search_locations or []) if real is not None else []
        if any(os.path.realpath(p).startswith(tuple(self.roots)) for p in [origin, *locations] if p):
            return self._stub(name)
        return None

    def _stub(self, name: str) -> importlib.machinery.ModuleSpec:
        self.stubbed.append(name)
        return importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)


def install(roots: Sequence[str], keep: Sequence[str] = ()) -> Finder:
    """Stand-ins for the repository's modules from now on (a module the spec imports lazily, in
    its reference, included), until :func:`uninstall`."""
    finder = Finder(roots, keep)
    sys.meta_path.insert(0, finder)
    return finder


def active() -> Finder | None:
    return next((f for f in sys.meta_path if isinstance(f, Finder)), None)


def uninstall(finder: Finder) -> None:
    """Take the finder away and forget every stand-in it made."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for name, mod in list(sys.modules.items()):
        if isinstance(mod, _StubModule):
            del sys.modules[name]
