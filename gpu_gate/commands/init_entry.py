"""The entry points of a kernel file, read from its syntax tree (nothing is imported): where each
kernel is launched (``kernel[grid](...)``), and what the library's users call to get there: a
``torch.autograd.Function`` (through ``.apply``), an ``nn.Module`` (its ``forward``) or a plain
function. ``gpu-gate init`` writes a spec skeleton for the best one and lists the others.

The call graph is the file's own: module-level functions called by name, ``Cls.apply`` (its
``forward`` and ``backward``) and ``self.method``. A launch through another module, or through a
kernel held in a variable, is not followed: the kernel is then listed without an entry point.
"""
from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable

from .. import pyscan

FUNCTION_BASES = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})
MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
KINDS = ("autograd", "module", "function")  # best first


@dataclasses.dataclass(frozen=True)
class Launch:
    kernel: str
    line: int
    host: str  # the function that launches it: "rms_norm_forward", "Cls.method"


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    default: str | None  # its source text, None without a default
    annotation: str | None
    kwonly: bool = False


@dataclasses.dataclass(frozen=True)
class Entry:
    kind: str  # one of KINDS
    name: str  # "LigerRMSNormFunction", "LigerRMSNorm", "scaled_softmax"
    line: int
    params: tuple[Param, ...]  # the call's arguments: ``forward``'s after ctx (or self)
    backward: bool  # an autograd Function with a backward of its own, or a module/function that calls one
    launches: tuple[Launch, ...]  # every launch it reaches
    init_params: tuple[Param, ...] = ()  # an nn.Module's constructor arguments (after self)
    parameters: tuple[str, ...] = ()  # an nn.Module's ``self.x = nn.Parameter(...)`` attributes

    @property
    def call(self) -> str:
        return f"{self.name}.apply" if self.kind == "autograd" else self.name


@dataclasses.dataclass(frozen=True)
class FileEntries:
    launches: tuple[Launch, ...]
    entries: tuple[Entry, ...]  # best first


def read(tree: ast.Module, kernels: Iterable[str]) -> FileEntries:
    """The launches of ``kernels`` (names defined in this file) and the entry points reaching them."""
    graph = _Graph(tree, frozenset(kernels))
    return FileEntries(tuple(graph.all_launches()), tuple(graph.entries()))


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, skip: int) -> tuple[Param, ...]:
    args = [*fn.args.posonlyargs, *fn.args.args]
    defaults: list[ast.expr | None] = [None] * (len(args) - len(fn.args.defaults)) + list(fn.args.defaults)
    out = [Param(a.arg, ast.unparse(d) if d is not None else None,
                 ast.unparse(a.annotation) if a.annotation is not None else None)
           for a, d in zip(args, defaults)][skip:]
    for a, kd in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
        out.append(Param(a.arg, ast.unparse(kd) if kd is not None else None,
                         ast.unparse(a.annotation) if a.annotation is not None else None, kwonly=True))
    return tuple(out)


class _Graph:
    def __init__(self, tree: ast.Module, kernels: frozenset[str]) -> None:
        self.aliases = pyscan.import_aliases(tree)
        self.kernels = kernels
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in kernels:
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions[f"{node.name}.{item.name}"] = item
        self._reach: dict[str, frozenset[Launch]] = {}

    # --- who launches what ------------------------------------------------------------------

    def own_launches(self, name: str) -> list[Launch]:
        found = []
        for node in ast.walk(self.functions[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                target = node.func.value
                kernel = target.id if isinstance(target, ast.Name) else None
                if kernel in self.kernels:
                    found.append(Launch(kernel, node.lineno, name))
        return found

    def callees(self, name: str) -> set[str]:
        cls = name.split(".")[0] if "." in name else None
        out: set[str] = set()
        for node in ast.walk(self.functions[name]):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in self.functions:
                out.add(f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                owner, attr = f.value.id, f.attr
                if attr == "apply" and owner in self.classes:  # Function.apply runs forward, then backward
                    out |= {f"{owner}.forward", f"{owner}.backward"} & set(self.functions)
                elif owner == "self" and cls and f"{cls}.{attr}" in self.functions:
                    out.add(f"{cls}.{attr}")
                elif owner in self.classes and f"{owner}.{attr}" in self.functions:
                    out.add(f"{owner}.{attr}")
        return out

    def reach(self, name: str, seen: frozenset[str] = frozenset()) -> frozenset[Launch]:
        if name in self._reach:
            return self._reach[name]
        if name in seen:
            return frozenset()
        found = set(self.own_launches(name))
        for callee in self.callees(name):
            found |= self.reach(callee, seen | {name})
        self._reach[name] = frozenset(found)
        return self._reach[name]

    def all_launches(self) -> list[Launch]:
        out = {launch for name in self.functions for launch in self.own_launches(name)}
        return sorted(out, key=lambda launch: launch.line)

    # --- entry points -----------------------------------------------------------------------

    def _base(self, cls: ast.ClassDef) -> str | None:
        for base in cls.bases:
            qual = pyscan.qualified_name(base, self.aliases)
            if qual in FUNCTION_BASES:
                return "autograd"
            if qual in MODULE_BASES:
                return "module"
        return None

    def entries(self) -> list[Entry]:
        found: list[Entry] = []
        called = {c for name in self.functions for c in self.callees(name)}
        for cls in self.classes.values():
            kind = self._base(cls)
            entry = self._class_entry(cls, kind) if kind else None
            if entry is not None:
                found.append(entry)
        for name, fn in self.functions.items():
            if "." in name or name.startswith("_"):
                continue
            launches = self.reach(name)
            if launches:
                found.append(Entry("function", name, fn.lineno, _params(fn, 0), self._calls_backward(name),
                                   _sorted(launches)))
        # the outermost first: an entry no other function of the file calls, then by kind and line
        return sorted(found, key=lambda e: (e.kind == "function" and e.name in called, KINDS.index(e.kind), e.line))

    def _class_entry(self, cls: ast.ClassDef, kind: str) -> Entry | None:
        forward = self.functions.get(f"{cls.name}.forward")
        if forward is None:
            return None
        launches = set(self.reach(f"{cls.name}.forward"))
        backward = f"{cls.name}.backward" in self.functions
        if kind == "autograd" and backward:
            launches |= self.reach(f"{cls.name}.backward")
        if not launches:
            return None
        skip = 1  # ctx / self
        init = self.functions.get(f"{cls.name}.__init__")
        return Entry(kind, cls.name, cls.lineno, _params(forward, skip),
                     backward if kind == "autograd" else self._calls_backward(f"{cls.name}.forward"),
                     _sorted(launches), _params(init, 1) if init is not None and kind == "module" else (),
                     _module_parameters(init, self.aliases) if init is not None and kind == "module" else ())

    def _calls_backward(self, name: str) -> bool:
        """Whether the function goes through an autograd Function of this file with a backward."""
        todo, seen = [name], set()
        while todo:
            cur = todo.pop()
            if cur in seen:
                continue
            seen.add(cur)
            if cur.endswith(".backward") and self._base(self.classes[cur.split(".")[0]]) == "autograd":
                return True
            todo += self.callees(cur)
        return False


def _module_parameters(init: ast.FunctionDef | ast.AsyncFunctionDef, aliases: dict[str, str]) -> tuple[str, ...]:
    """``self.weight = nn.Parameter(...)`` in a constructor: ``("weight",)``."""
    out = []
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            qual = pyscan.qualified_name(node.value, aliases) or ""
            if qual.endswith("nn.Parameter") or qual.endswith("nn.parameter.Parameter"):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        out.append(t.attr)
    return tuple(out)


def _sorted(launches: Iterable[Launch]) -> tuple[Launch, ...]:
    return tuple(sorted(set(launches), key=lambda launch: (launch.line, launch.kernel)))
