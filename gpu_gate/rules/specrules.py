"""A spec's rules read statically from its ``@gg.spec(...)`` keywords, with the AST (no import, no torch).

What can be read as literals (tolerance, dims, inputs' dtypes, checks, grads, devices) is read as data;
everything else (the reference above all) is kept as its AST, compared by structure, and followed to
the repository modules it uses.
"""
from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import discovery, git, pyscan
from ..changes import matcher

UNREAD = object()  # a keyword written as an expression gpu-gate cannot evaluate without importing
_CONSTRUCTORS = {"Dim", "Tensor", "Index", "Tolerance"}  # gg.* calls read as data; any other call is code


@dataclasses.dataclass
class SpecRules:
    file: str
    name: str
    line: int
    keywords: dict[str, ast.expr]
    module: ast.Module
    source: str  # the whole spec module
    aliases: dict[str, str]
    candidate: ast.FunctionDef | ast.AsyncFunctionDef

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"

    def line_of(self, key: str) -> int:
        node = self.keywords.get(key)
        return node.lineno if node is not None else self.line

    def literal(self, key: str, default: Any = None) -> Any:
        node = self.keywords.get(key)
        return default if node is None else literal(node)

    def reference_shape(self) -> str | None:
        return self.shape("reference")

    def shape(self, key: str) -> str | None:
        """A keyword's code as a structure (formatting and comments do not count), with the functions and
        module-level values of the spec module that it names, so `tolerance=TOL` changes when TOL does."""
        node = self.keywords.get(key)
        if node is None:
            return None
        return "\n".join([ast.dump(node), *(ast.dump(d) for d in self.local_functions(node))])

    def local_functions(self, node: ast.AST) -> list[ast.stmt]:
        """Functions and assignments of the spec module that ``node`` refers to, directly or through one another."""
        defined: dict[str, ast.stmt] = {}
        for stmt in self.module.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt is not self.candidate:
                defined[stmt.name] = stmt
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    for bound in ast.walk(target):
                        if isinstance(bound, ast.Name):
                            defined[bound.id] = stmt
        found: dict[int, ast.stmt] = {}
        todo: list[ast.AST] = [node]
        while todo:
            for used in sorted(_names(todo.pop())):
                hit = defined.get(used)
                if hit is not None and id(hit) not in found:
                    found[id(hit)] = hit
                    todo.append(hit)
        return list(found.values())

    def modules_used(self, node: ast.AST, index: pyscan.ModuleIndex) -> dict[str, str]:
        """Repository modules whose names ``node`` (and the spec-module functions it calls) uses: file -> name."""
        used: dict[str, str] = {}
        for part in [node, *self.local_functions(node)]:
            for name in _names(part):
                qualified = self.aliases.get(name)
                if qualified is None:
                    continue
                for file in _module_files(qualified, index):
                    used.setdefault(file, name)
        used.pop(self.file, None)
        return used


def literal(node: ast.expr) -> Any:
    """The value of a literal, a ``gg.Xxx(...)`` call as a dict of its arguments, or UNREAD."""
    if isinstance(node, ast.Call):
        args = [literal(a) for a in node.args]
        kwargs = {k.arg: literal(k.value) for k in node.keywords if k.arg}
        if any(v is UNREAD for v in [*args, *kwargs.values()]) or any(k.arg is None for k in node.keywords):
            return UNREAD
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "?")
        if callee not in _CONSTRUCTORS:
            return UNREAD
        return {"__call__": callee, "args": args, **kwargs}
    if isinstance(node, ast.Dict):
        keys = [literal(k) if k is not None else UNREAD for k in node.keys]
        values = [literal(v) for v in node.values]
        if any(k is UNREAD or not isinstance(k, (str, int)) for k in keys) or any(v is UNREAD for v in values):
            return UNREAD
        return dict(zip(keys, values))
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [literal(e) for e in node.elts]
        return UNREAD if any(i is UNREAD for i in items) else items
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNREAD


def read_specs(repo: Path, rev: str | None, spec_globs: Iterable[str]) -> dict[str, SpecRules]:
    """Every spec in the spec files at ``rev`` (None: the work tree), by id."""
    snap = git.Snapshot(repo, rev)
    is_spec = matcher(list(spec_globs))
    files = sorted(p for p in snap.files if p.endswith(".py") and is_spec(p))
    found: dict[str, SpecRules] = {}
    for path, raw in snap.read_many(files).items():
        try:
            tree = pyscan.parse(raw, path)
        except pyscan.ParseError:
            continue  # reported by discovery as a parse-error finding
        for rules in _specs_in(tree, path, raw.decode("utf-8", "replace")):
            found[rules.id] = rules
    return found


def specs_in_source(source: str, path: str) -> list[SpecRules]:
    """The specs of one module's source (raises pyscan.ParseError)."""
    return _specs_in(pyscan.parse(source.encode(), path), path, source)


def _specs_in(tree: ast.Module, path: str, source: str) -> list[SpecRules]:
    aliases = pyscan.import_aliases(tree)
    out = []
    for fn in pyscan.functions(tree):
        deco = next((d for d in fn.decorator_list
                     if discovery.is_spec_decorator(pyscan.qualified_name(d, aliases))), None)
        if deco is None:
            continue
        kw = {k.arg: k.value for k in deco.keywords if k.arg} if isinstance(deco, ast.Call) else {}
        name = kw.get("name")
        sname = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else fn.name
        out.append(SpecRules(path, sname, deco.lineno, kw, tree, source, aliases, fn))
    return out


def _names(node: ast.AST) -> set[str]:
    """Names a piece of code uses; a function's decorators are not its code (the spec's own keywords
    sit in the candidate's decorator)."""
    parts: list[ast.AST] = list(node.body) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else [node]
    return {n.id for part in parts for n in ast.walk(part) if isinstance(n, ast.Name)}


def _module_files(qualified: str, index: pyscan.ModuleIndex) -> list[str]:
    """The repository file a qualified name comes from: `pkg.mod.func` -> pkg/mod.py (longest module)."""
    parts = qualified.split(".")
    for end in range(len(parts), 0, -1):
        files = index.module_files(".".join(parts[:end]))
        if files:
            return files[-1:]
    return []
