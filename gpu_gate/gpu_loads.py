"""GPU code that arrives as a library or through a name computed at run time, read from the syntax tree.

A kernel need not be defined in Python: ``ctypes.CDLL("./libk.so")`` or ``ffi.dlopen(path)``
loads a repository's compiled library, ``torch.ops.load_library`` a custom op, and
``getattr(cupy, "Raw" + "Kernel")`` reaches a compiling call by a name no scanner can read.
Such a file holds GPU code gpu-gate cannot name: these uses are GPU uses, so a file under the
kernel globs that has them and no kernel gpu-gate reads is ``unrecognised`` (see
:mod:`gpu_gate.kernelscan`). A library the loader finds by its bare name (``"libc.so.6"``,
``ctypes.util.find_library("cuda")``) is the system's, not the repository's, and does not count.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator

from . import kernel_languages as languages
from . import pyscan

NATIVE = "native-library"  # the GpuUse language of a library loaded from a path
LOADERS = frozenset({"ctypes.CDLL", "ctypes.PyDLL", "ctypes.cdll.LoadLibrary", "ctypes.pydll.LoadLibrary",
                     "ctypes.LibraryLoader", "torch.ops.load_library", "torch.classes.load_library"})
SYSTEM_LOOKUPS = frozenset({"ctypes.util.find_library"})
COMPUTED = "<computed>"


def uses(tree: ast.Module, aliases: dict[str, str]) -> Iterator[tuple[str, int, str]]:
    """``(qualified name, line, language)`` of every library load from a path and every
    ``getattr`` on a GPU module by a computed name."""
    has_cffi = any(q == "cffi" or q.startswith("cffi.") for q in aliases.values())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        loaded = _library_load(node, aliases, has_cffi)
        if loaded is not None:
            yield loaded, node.lineno, NATIVE
            continue
        computed = _computed_getattr(node, aliases)
        if computed is not None:
            yield computed


def _library_load(call: ast.Call, aliases: dict[str, str], has_cffi: bool) -> str | None:
    qual = pyscan.qualified_name(call.func, aliases)
    is_dlopen = has_cffi and isinstance(call.func, ast.Attribute) and call.func.attr == "dlopen"
    if qual not in LOADERS and not is_dlopen:
        return None
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("name", "path")), None)
    if arg is None or _system_name(arg, aliases):
        return None
    return qual if qual in LOADERS else "cffi.FFI.dlopen"


def _system_name(arg: ast.expr, aliases: dict[str, str]) -> bool:
    """A bare library name (the loader searches the system's paths), or the system's lookup of one."""
    if isinstance(arg, ast.Constant):
        return arg.value is None or (isinstance(arg.value, str) and "/" not in arg.value)
    return isinstance(arg, ast.Call) and pyscan.qualified_name(arg.func, aliases) in SYSTEM_LOOKUPS


def _computed_getattr(call: ast.Call, aliases: dict[str, str]) -> tuple[str, int, str] | None:
    """``getattr(M, name)`` where M is (or holds) a GPU module: with a literal name, the use of
    ``M.name``; with a computed one, a use of M whatever the name turns out to be."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "getattr" and "getattr" not in aliases
            and len(call.args) >= 2):
        return None
    module = pyscan.qualified_name(call.args[0], aliases)
    if module is None:
        return None
    name = call.args[1]
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        full = f"{module}.{name.value}"
        lang = languages.gpu_language(full) or languages.language_of_call(full) or languages.language_of_decorator(full)
        return (full, call.lineno, lang.name) if lang is not None else None
    lang = languages.star_language(module)
    return (f"{module}.{COMPUTED}", call.lineno, lang.name) if lang is not None else None
