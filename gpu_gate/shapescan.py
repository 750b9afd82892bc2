"""Size thresholds in a spec's candidate and the wrapper code it calls, read from the syntax tree.

Kernels take other code paths by size: ``if n_rows >= 32768 and n_cols <= 256`` (a backward that
splits dW another way), ``triton.next_power_of_2(n) > 8192`` (another block size), ``if M * N >
...``. The wrapper's own source says where. This module follows the spec's candidate into the
functions it calls in the repository (by the files' import statements, as :mod:`gpu_gate.pyscan`
resolves them: never importing anything), keeps track of which values derive from which of the
spec's dims (``x.shape[0]``, ``n_rows, n_cols = X.view(-1, H).shape``, a helper's return value,
``ctx.save_for_backward`` into the backward), and records every comparison of such a value with a
constant or with another such value, as a :class:`~gpu_gate.protocol.shapes.Threshold`. The
schedule then draws cases on both sides of each (:mod:`gpu_gate.protocol.planned`).

It is a reading, not an execution: both branches of an ``if`` are read, a value assigned
differently in them becomes unknown, loops are read once, and what cannot be told (a value from a
call outside the repository, a Triton kernel's own constexprs) is unknown and compares to nothing.
"""
from __future__ import annotations

import ast
import dataclasses
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeAlias, TypeGuard, TypeVar

from . import discovery, pyscan
from .protocol.shapes import Atom, Expr, Threshold

MAX_DEPTH = 10  # calls followed, one inside another
MAX_RUNS = 400  # function bodies read per spec, in all
MAX_CONJUNCTIONS = 8  # of one condition, after and/or/not are multiplied out
MAX_TEXT = 160
TENSOR_SAME = frozenset({"contiguous", "float", "half", "bfloat16", "double", "to", "clone", "detach", "cuda", "cpu",
                         "type_as", "requires_grad_", "abs", "neg", "exp", "sigmoid", "relu", "mul", "add", "sub",
                         "div", "pow", "sqrt", "rsqrt", "square", "tanh", "zero_", "fill_", "copy_", "mul_", "add_"})
LIKE = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like"})
INT_FUNCTIONS = {"next_power_of_2": "next_power_of_2", "cdiv": "cdiv", "max": "max", "min": "min", "abs": "abs",
                 "int": "int", "ceil": "ceil", "floor": "floor", "log2": "log2", "sqrt": "sqrt"}
KERNEL_DECORATORS = pyscan.TRITON_DECORATORS


# --- values ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Sym:
    """An integer (or float) derived from sizes: an expression over the spec's dims."""

    e: Expr

    @property
    def const(self) -> bool:
        return _no_dims(self.e)


@dataclasses.dataclass(frozen=True)
class Shape:
    axes: tuple[Value, ...]  # sizes (Sym) where known; a concatenation with a Tup may carry its items


@dataclasses.dataclass(frozen=True)
class Tens:
    shape: Shape | None


@dataclasses.dataclass(frozen=True)
class Tup:
    items: tuple[Value, ...]


@dataclasses.dataclass(frozen=True)
class Cond:
    """A boolean derived from sizes (``fast = n >= 4096``): its conjunctions of atoms."""

    dnf: tuple[tuple[Atom, ...], ...]


@dataclasses.dataclass
class Ctx:
    """An autograd ``ctx``: what the forward saved, for the backward."""

    saved: Tup | None = None
    attrs: dict[str, Value] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Module:
    path: str  # repository-relative
    dotted: str
    tree: ast.Module
    aliases: Mapping[str, str]  # local name -> qualified name (relative imports resolved)

    def top(self, name: str) -> ast.stmt | None:
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
                return stmt
        for stmt in reversed(self.tree.body):
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                return stmt
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                return stmt
        return None


@dataclasses.dataclass(frozen=True)
class Ref:
    """A function or class of a repository module (with the variables it closes over, if nested)."""

    module: Module
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    closure: tuple[tuple[str, Value], ...] = ()


@dataclasses.dataclass(frozen=True)
class ModRef:
    module: Module


@dataclasses.dataclass(frozen=True)
class Inst:
    cls: Ref


# what the reading knows of a value; None where it is unknown
Value: TypeAlias = Sym | Shape | Tens | Tup | Cond | Ctx | Ref | ModRef | Inst | None


def _no_dims(e: Expr) -> bool:
    if e[0] == "dim":
        return False
    if e[0] == "const":
        return True
    return all(_no_dims(a) for a in e[2 if e[0] == "call" else 1:])


def const(v: int | float) -> Sym:
    return Sym(("const", v))


# --- the reading ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Reading:
    thresholds: list[Threshold]
    files: list[str]  # the repository files read
    why: str | None = None  # why nothing could be read


class _Return(Exception):
    pass


class Reader:
    def __init__(self, repo_root: Path, roots: Iterable[str]) -> None:
        self.repo_root = repo_root
        self.roots = list(dict.fromkeys(r.strip("/") for r in roots))
        self.modules: dict[str, Module | None] = {}
        self.found: dict[tuple[tuple[tuple[str, str, float], ...], ...], Threshold] = {}
        self.runs = 0
        self.memo: dict[tuple[int, str], Value] = {}
        self.active: set[int] = set()

    # modules ------------------------------------------------------------------------------------
    def load(self, path: str, dotted: str, source: str | None = None) -> Module | None:
        if path in self.modules:
            return self.modules[path]
        try:
            text = source if source is not None else (self.repo_root / path).read_text(encoding="utf-8")
            tree = pyscan.parse(text, path)
        except (OSError, UnicodeDecodeError, pyscan.ParseError):
            self.modules[path] = None
            return None
        is_pkg = posixpath.basename(path) == "__init__.py"
        package = dotted if is_pkg else dotted.rpartition(".")[0]
        mod = Module(path, dotted, tree, _aliases(tree, package))
        self.modules[path] = mod
        return mod

    def find_module(self, dotted: str) -> Module | None:
        parts = dotted.split(".")
        for root in self.roots:
            base = posixpath.join(root, *parts) if root else posixpath.join(*parts)
            for cand in (base + ".py", base + "/__init__.py"):
                if (self.repo_root / cand).is_file():
                    return self.load(cand, dotted)
        return None

    def resolve(self, qualified: str, depth: int = 0) -> Value:
        """A qualified name (``pkg.mod.func``) as a value: a repository function, class, module
        or module-level constant; None where it is not the repository's."""
        parts = qualified.split(".")
        for k in range(len(parts), 0, -1):
            mod = self.find_module(".".join(parts[:k]))
            if mod is None:
                continue
            value: Value = ModRef(mod)
            for name in parts[k:]:
                value = self.attribute_of(value, name, depth)
                if value is None:
                    return None
            return value
        return None

    def attribute_of(self, value: Value, name: str, depth: int = 0) -> Value:
        if isinstance(value, ModRef):
            return self.global_name(value.module, name, depth)
        if isinstance(value, Ref) and isinstance(value.node, ast.ClassDef):
            method = self.method(value, name)
            return method
        return None

    def global_name(self, mod: Module, name: str, depth: int = 0) -> Value:
        stmt = mod.top(name)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return Ref(mod, stmt)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and depth < MAX_DEPTH:
            value = Frame(self, mod, {}, depth + 1).eval(stmt.value)
            return value if isinstance(value, (Sym, Ref, ModRef)) else None
        qualified = mod.aliases.get(name)
        if qualified is not None and depth < MAX_DEPTH:
            return self.resolve(qualified, depth + 1)
        return None

    def method(self, cls: Ref, name: str, depth: int = 0) -> Ref | None:
        assert isinstance(cls.node, ast.ClassDef)
        for stmt in cls.node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return Ref(cls.module, stmt)
        if depth > 3:
            return None
        for base in cls.node.bases:
            b = Frame(self, cls.module, {}, MAX_DEPTH - 1).eval(base)
            if isinstance(b, Ref) and isinstance(b.node, ast.ClassDef):
                found = self.method(b, name, depth + 1)
                if found is not None:
                    return found
        return None

    # recording ----------------------------------------------------------------------------------
    def record(self, mod: Module, node: ast.AST, dnf: tuple[tuple[Atom, ...], ...]) -> None:
        dnf = tuple(c for c in dnf if c)
        if not dnf:
            return
        key = tuple(sorted(tuple(sorted((repr(a.expr), a.op, a.bound) for a in c)) for c in dnf))
        if key in self.found:
            return
        text = ast.unparse(node)
        text = text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."
        self.found[key] = Threshold(f"{mod.path}:{getattr(node, 'lineno', 0)}", text, dnf)

    # calls --------------------------------------------------------------------------------------
    def call(self, fn: Ref, args: list[Value], kwargs: dict[str, Value], depth: int,
             bound_self: Inst | None = None) -> Value:
        node = fn.node
        if isinstance(node, ast.ClassDef) or depth > MAX_DEPTH or self.runs >= MAX_RUNS:
            return None
        if _is_kernel(node, fn.module):
            return None  # a Triton kernel: its branches are on constexprs, not on the wrapper's sizes
        key = (id(node), repr((args, sorted(kwargs.items()), bound_self)))
        if key in self.memo:
            return self.memo[key]
        if id(node) in self.active:
            return None  # recursion
        self.runs += 1
        self.active.add(id(node))
        try:
            env = dict(fn.closure)
            env.update(_bind(node, ([bound_self] if bound_self is not None else []) + args, kwargs,
                             Frame(self, fn.module, {}, depth)))
            frame = Frame(self, fn.module, env, depth)
            frame.block(node.body)
            value = frame.returned()
        finally:
            self.active.discard(id(node))
        self.memo[key] = value
        return value

    def autograd(self, cls: Ref, args: list[Value], kwargs: dict[str, Value], depth: int) -> Value:
        """``Function.apply(*args)``: the forward with a fresh ctx, then the backward with the
        gradients of its outputs (shaped as they are) and the ctx the forward filled."""
        ctx = Ctx()
        out = None
        forward = self.method(cls, "forward")
        if forward is not None:
            out = self.call(forward, [ctx, *args], kwargs, depth + 1)
        backward = self.method(cls, "backward")
        if backward is not None:
            grads: list[Value] = list(out.items) if isinstance(out, Tup) else [out]
            grads = [Tens(g.shape) if isinstance(g, Tens) else None for g in grads]
            self.call(backward, [ctx, *grads], {}, depth + 1)
        return out


def _is_kernel(node: ast.AST, mod: Module) -> bool:
    decos = getattr(node, "decorator_list", [])
    return any(pyscan.qualified_name(d, dict(mod.aliases)) in KERNEL_DECORATORS for d in decos)


def _bind(node: ast.FunctionDef | ast.AsyncFunctionDef, args: Sequence[Value], kwargs: dict[str, Value],
          frame: Frame) -> dict[str, Value]:
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    env: dict[str, Value] = {}
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (p, d) in enumerate(zip(positional, defaults)):
        if i < len(args):
            env[p.arg] = args[i]
        elif p.arg in kwargs:
            env[p.arg] = kwargs[p.arg]
        else:
            env[p.arg] = frame.eval(d) if d is not None else None
    if a.vararg is not None:
        env[a.vararg.arg] = Tup(tuple(args[len(positional):]))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        env[p.arg] = kwargs.get(p.arg, frame.eval(d) if d is not None else None)
    return env


def _aliases(tree: ast.Module, package: str) -> dict[str, str]:
    """Local name -> qualified name, by the module's import statements, relative ones resolved
    against ``package``."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for al in node.names:
                out[al.asname or al.name.split(".")[0]] = al.name if al.asname else al.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts):
                    continue
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for al in node.names:
                if al.name != "*":
                    out[al.asname or al.name] = f"{base}.{al.name}" if base else al.name
    return out


# --- one function body ----------------------------------------------------------------------------

class Frame:
    def __init__(self, reader: Reader, module: Module, env: dict[str, Value], depth: int) -> None:
        self.r, self.m, self.env, self.depth = reader, module, env, depth
        self.returns: list[Value] = []

    def returned(self) -> Value:
        return _merge_all(self.returns)

    # statements
    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            value = self.eval(s.value)
            for t in s.targets:
                self.bind(t, value)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.bind(s.target, self.eval(s.value))
        elif isinstance(s, ast.AugAssign):
            value = self.eval(ast.BinOp(left=s.target, op=s.op, right=s.value))
            self.bind(s.target, value)
        elif isinstance(s, ast.If):
            self.test(s.test)
            self.branches(s.body, s.orelse)
        elif isinstance(s, (ast.While,)):
            self.test(s.test)
            self.branches(s.body, s.orelse)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self.eval(s.iter)
            self.bind(s.target, None)
            self.branches(s.body, s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                v = self.eval(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, v)
            self.block(s.body)
        elif isinstance(s, ast.Try):
            self.block(s.body)
            for h in s.handlers:
                self.branches(h.body, [])
            self.block(s.orelse)
            self.block(s.finalbody)
        elif isinstance(s, ast.Return):
            self.returns.append(self.eval(s.value) if s.value is not None else None)
        elif isinstance(s, ast.Expr):
            self.eval(s.value)
        elif isinstance(s, ast.Assert):
            self.test(s.test)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.env[s.name] = Ref(self.m, s, tuple((k, v) for k, v in self.env.items() if _plain(v)))

    def branches(self, a: list[ast.stmt], b: list[ast.stmt]) -> None:
        before = dict(self.env)
        self.block(a)
        after_a = self.env
        self.env = dict(before)
        self.block(b)
        after_b = self.env
        merged = {}
        for k in {*after_a, *after_b}:
            if k in after_a and k in after_b:
                merged[k] = after_a[k] if after_a[k] == after_b[k] else None
            else:
                merged[k] = after_a.get(k, after_b.get(k))
        self.env = merged

    def bind(self, target: ast.expr, value: Value) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items: tuple[Value, ...] | None = None
            if isinstance(value, Tup):
                items = value.items
            elif isinstance(value, Shape):
                items = value.axes
            plain = [t for t in target.elts if not isinstance(t, ast.Starred)]
            if items is not None and len(plain) == len(target.elts) and len(items) == len(plain):
                for t, v in zip(target.elts, items):
                    self.bind(t, v)
            else:
                for t in target.elts:
                    self.bind(t.value if isinstance(t, ast.Starred) else t, None)
        elif isinstance(target, ast.Attribute):
            owner = self.eval(target.value)
            if isinstance(owner, Ctx):
                owner.attrs[target.attr] = value

    # conditions
    def test(self, node: ast.expr) -> None:
        """A branch's condition: recorded where it compares sizes."""
        if isinstance(node, ast.Name):
            return  # a Cond bound earlier was recorded where it was computed
        dnf = self.cond(node)
        if dnf:
            self.r.record(self.m, node, dnf)

    def cond(self, node: ast.expr) -> tuple[tuple[Atom, ...], ...] | None:
        """The condition as conjunctions of atoms over the dims; None where it says nothing about
        sizes. Parts that cannot be read (a dtype test) are left out of their conjunction."""
        if isinstance(node, ast.BoolOp):
            parts = [self.cond(v) for v in node.values]
            known = [p for p in parts if p]
            if not known:
                return None
            if isinstance(node.op, ast.Or):
                return tuple(c for p in known for c in p)[:MAX_CONJUNCTIONS]
            out: tuple[tuple[Atom, ...], ...] = ((),)
            for p in known:
                out = tuple(a + b for a in out for b in p)[:MAX_CONJUNCTIONS]
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.cond(node.operand)
            return _negate(inner) if inner else None
        if isinstance(node, ast.Compare):
            atoms = []
            left = self.eval(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = self.eval(right_node)
                atom = _atom(left, op, right)
                if atom is not None:
                    atoms.append(atom)
                left = right
            return (tuple(atoms),) if atoms else None
        value = self.eval(node)
        return value.dnf if isinstance(value, Cond) else None

    # expressions
    def eval(self, node: ast.expr | None) -> Value:
        if node is None:
            return None
        try:
            return self._eval(node)
        except RecursionError:
            return None

    def _eval(self, node: ast.expr) -> Value:
        if isinstance(node, ast.Constant):
            c = node.value
            return const(c) if isinstance(c, (int, float)) and not isinstance(c, bool) else None
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(self.eval(node.value), node.slice)
        if isinstance(node, ast.BinOp):
            return _binop(self.eval(node.left), node.op, self.eval(node.right))
        if isinstance(node, ast.UnaryOp):
            v = self.eval(node.operand)
            if isinstance(node.op, ast.USub) and isinstance(v, Sym):
                return Sym(("call", "neg", v.e))
            if isinstance(node.op, ast.Not):
                dnf = self.cond(node)
                if dnf:
                    self.r.record(self.m, node, dnf)
                    return Cond(dnf)
            return v if isinstance(node.op, ast.UAdd) else None
        if isinstance(node, (ast.Tuple, ast.List)):
            items: list[Value] = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    v = self.eval(e.value)
                    if isinstance(v, (Shape, Tup)):
                        items.extend(v.axes if isinstance(v, Shape) else v.items)
                        continue
                    return None
                items.append(self.eval(e))
            return Tup(tuple(items))
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            dnf = self.cond(node)
            if dnf:
                self.r.record(self.m, node, dnf)
                return Cond(dnf)
            return None
        if isinstance(node, ast.IfExp):
            self.test(node.test)
            a, b = self.eval(node.body), self.eval(node.orelse)
            return a if a == b else None
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.NamedExpr):
            v = self.eval(node.value)
            self.bind(node.target, v)
            return v
        return None

    def name(self, name: str) -> Value:
        if name in self.env:
            return self.env[name]
        return self.r.global_name(self.m, name, self.depth)

    def attribute(self, node: ast.Attribute) -> Value:
        base = self.eval(node.value)
        attr = node.attr
        if isinstance(base, Tens):
            if attr == "shape":
                return base.shape
            if attr in ("T", "mT") and base.shape is not None and len(base.shape.axes) >= 2:
                axes = base.shape.axes
                return Tens(Shape(tuple(reversed(axes))) if attr == "T" else Shape((*axes[:-2], axes[-1], axes[-2])))
            if attr == "ndim" and base.shape is not None:
                return const(len(base.shape.axes))
            return None
        if isinstance(base, Ctx):
            if attr == "saved_tensors":
                return base.saved
            return base.attrs.get(attr)
        if isinstance(base, (ModRef, Ref)):
            return self.r.attribute_of(base, attr, self.depth)
        if base is None:
            qualified = pyscan.qualified_name(node, dict(self.m.aliases))
            if qualified is not None and not qualified.startswith(("torch.", "triton.", "math.", "numpy.")):
                return self.r.resolve(qualified, self.depth)
        return None

    def subscript(self, base: Value, index: ast.expr) -> Value:
        seq = base.axes if isinstance(base, Shape) else base.items if isinstance(base, Tup) else None
        if seq is None:
            return Tens(None) if isinstance(base, Tens) else None
        if isinstance(index, ast.Slice):
            lo, hi = self.eval(index.lower), self.eval(index.upper)
            if index.step is not None or any(v is not None and not (isinstance(v, Sym) and v.const) for v in (lo, hi)):
                return None
            a = _int(lo) if lo is not None else None
            b = _int(hi) if hi is not None else None
            part = tuple(seq[a:b])
            return Shape(part) if isinstance(base, Shape) else Tup(part)
        i = self.eval(index)
        if isinstance(i, Sym) and i.const:
            k = _int(i)
            if k is not None and -len(seq) <= k < len(seq):
                return seq[k]
        return None

    def call(self, node: ast.Call) -> Value:
        if isinstance(node.func, ast.Subscript):  # kernel[grid](...): a launch
            for a in node.args:
                self.eval(a)
            return None
        args, kwargs = self.arguments(node)
        if isinstance(node.func, ast.Attribute):
            owner = self.eval(node.func.value)
            method = node.func.attr
            done, value = self.method_call(owner, method, args, kwargs)
            if done:
                return value
        fn_name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        callee = self.eval(node.func)
        if isinstance(callee, Ref):
            if isinstance(callee.node, ast.ClassDef):
                return Inst(callee)
            return self.r.call(callee, args, kwargs, self.depth + 1)
        if isinstance(callee, Inst):
            fwd = self.r.method(callee.cls, "forward") or self.r.method(callee.cls, "__call__")
            return self.r.call(fwd, args, kwargs, self.depth + 1, bound_self=callee) if fwd else None
        return self.builtin(fn_name, args)

    def arguments(self, node: ast.Call) -> tuple[list[Value], dict[str, Value]]:
        args: list[Value] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.eval(a.value)
                if isinstance(v, (Tup, Shape)):
                    args.extend(v.items if isinstance(v, Tup) else v.axes)
                else:
                    args.append(None)
            else:
                args.append(self.eval(a))
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords if k.arg}
        return args, kwargs

    def method_call(self, owner: Value, method: str, args: list[Value], kwargs: dict[str, Value]) -> tuple[bool, Value]:
        if isinstance(owner, Ref) and isinstance(owner.node, ast.ClassDef) and method == "apply":
            return True, self.r.autograd(owner, args, kwargs, self.depth)
        if isinstance(owner, Ctx):
            if method == "save_for_backward":
                owner.saved = Tup(tuple(args))
            return True, None
        if isinstance(owner, Tens):
            return True, _tensor_method(owner, method, args)
        if isinstance(owner, Shape) and method == "numel":
            return True, _product(owner.axes)
        return False, None

    def builtin(self, name: str | None, args: list[Value]) -> Value:
        if name in LIKE and args and isinstance(args[0], Tens):
            return Tens(args[0].shape)
        if name == "len" and args and isinstance(args[0], (Shape, Tup)):
            return const(len(args[0].axes if isinstance(args[0], Shape) else args[0].items))
        if name == "prod" and args and isinstance(args[0], (Shape, Tup)):
            return _product(args[0].axes if isinstance(args[0], Shape) else args[0].items)
        fn = INT_FUNCTIONS.get(name or "")
        if fn is None:
            return None
        if fn in ("max", "min") and len(args) == 1 and isinstance(args[0], (Tup, Shape)):
            args = list(args[0].items if isinstance(args[0], Tup) else args[0].axes)
        if not args or not _all_of(args, Sym):
            return None
        if fn in ("max", "min") and len(args) > 2:
            out = args[0].e
            for a in args[1:]:
                out = ("call", fn, out, a.e)
            return Sym(out)
        return Sym(("call", fn, *(a.e for a in args)))


_V = TypeVar("_V")


def _all_of(values: Sequence[Value], kind: type[_V]) -> TypeGuard[Sequence[_V]]:
    return all(isinstance(v, kind) for v in values)


def _plain(v: Value) -> bool:
    return isinstance(v, (Sym, Shape, Tens, Tup, Cond, Ref, ModRef)) or v is None


def _int(v: Value) -> int | None:
    if isinstance(v, Sym) and v.const:
        from .protocol.shapes import evaluate

        try:
            x = evaluate(v.e, {})
        except ValueError:
            return None
        return int(x) if isinstance(x, (int, float)) and float(x).is_integer() else None
    return None


def _product(items: Iterable[Value]) -> Sym | None:
    out: Expr | None = None
    for a in items:
        if not isinstance(a, Sym):
            return None
        out = a.e if out is None else ("*", out, a.e)
    return Sym(out if out is not None else ("const", 1))


def _binop(a: Value, op: ast.operator, b: Value) -> Value:
    sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/", ast.Mod: "%",
           ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|"}.get(type(op))
    if isinstance(a, Sym) and isinstance(b, Sym) and sym is not None:
        return Sym((sym, a.e, b.e))
    if isinstance(op, ast.Add) and isinstance(a, (Shape, Tup)) and isinstance(b, (Shape, Tup)):
        left = a.axes if isinstance(a, Shape) else a.items
        right = b.axes if isinstance(b, Shape) else b.items
        return Shape(tuple(left) + tuple(right))
    return None


def _tensor_method(t: Tens, method: str, args: list[Value]) -> Value:
    axes = t.shape.axes if t.shape is not None else None
    if method in TENSOR_SAME:
        return Tens(t.shape)
    if axes is None:
        return Tens(None) if method in ("view", "reshape", "flatten", "t", "transpose", "unsqueeze") else None
    if method == "size":
        if not args:
            return Shape(axes)
        k = _int(args[0])
        return axes[k] if k is not None and -len(axes) <= k < len(axes) else None
    if method == "numel":
        return _product(axes)
    if method == "dim":
        return const(len(axes))
    if method in ("view", "reshape"):
        want = list(args[0].items if len(args) == 1 and isinstance(args[0], Tup) else
                    args[0].axes if len(args) == 1 and isinstance(args[0], Shape) else args)
        return Tens(_reshaped(axes, want))
    if method == "flatten" and not args:
        return Tens(Shape((_product(axes),)))
    if method == "t" and len(axes) == 2:
        return Tens(Shape((axes[1], axes[0])))
    if method == "transpose" and len(args) == 2:
        i, j = _int(args[0]), _int(args[1])
        if i is not None and j is not None and -len(axes) <= i < len(axes) and -len(axes) <= j < len(axes):
            new = list(axes)
            new[i], new[j] = new[j], new[i]
            return Tens(Shape(tuple(new)))
    if method == "unsqueeze" and args:
        k = _int(args[0])
        if k is not None:
            new = list(axes)
            new.insert(k if k >= 0 else len(new) + 1 + k, const(1))
            return Tens(Shape(tuple(new)))
    if method == "view_as" and args and isinstance(args[0], Tens):
        return Tens(args[0].shape)
    return Tens(None)


def _reshaped(axes: tuple[Value, ...], want: list[Value]) -> Shape | None:
    """The shape of ``view(*want)``: a ``-1`` is the element count over the other sizes."""
    if not want or not _all_of(want, Sym):
        return None
    known = [w for w in want if not (w.const and _int(w) == -1)]
    if len(known) == len(want):
        return Shape(tuple(want))
    if len(known) != len(want) - 1:
        return None
    free = _quotient(axes, known)
    if free is None:
        return None
    return Shape(tuple(free if (w.const and _int(w) == -1) else w for w in want))


def _factors(e: Expr) -> list[Expr]:
    return [*_factors(e[1]), *_factors(e[2])] if e[0] == "*" else [e]


def _quotient(axes: Iterable[Value], known: Iterable[Value]) -> Sym | None:
    """The product of ``axes`` over the product of ``known``, with the factors they share taken out
    (``(b * t * h) // h`` is ``b * t``)."""
    total, rest = _product(axes), _product(known)
    if total is None or rest is None:
        return None
    top = _factors(total.e)
    bottom = []
    for f in _factors(rest.e):
        if f in top:
            top.remove(f)
        elif f != ("const", 1):
            bottom.append(f)
    num = _product(Sym(f) for f in top) if top else const(1)
    if not bottom:
        return num
    den = _product(Sym(f) for f in bottom)
    return Sym(("//", num.e, den.e)) if num is not None and den is not None else None


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def _atom(left: Value, op: ast.cmpop, right: Value) -> Atom | None:
    sym = _OPS.get(type(op))
    if sym is None or not isinstance(left, Sym) or not isinstance(right, Sym):
        return None
    if (left.const and right.const) or left.e == right.e:
        return None  # constant either way: no size is on either side of it
    if right.const:
        bound = _number(right)
        return Atom(left.e, sym, bound) if bound is not None else None
    if left.const:
        bound = _number(left)
        return Atom(right.e, _FLIP[sym], bound) if bound is not None else None
    return Atom(("-", left.e, right.e), sym, 0.0)


def _number(v: Sym) -> float | None:
    from .protocol.shapes import evaluate

    try:
        x = evaluate(v.e, {})
    except ValueError:
        return None
    return float(x) if isinstance(x, (int, float)) else None


def _negate(dnf: tuple[tuple[Atom, ...], ...]) -> tuple[tuple[Atom, ...], ...]:
    """not (A or B) = (not A) and (not B); not (a and b) = (not a) or (not b)."""
    out: tuple[tuple[Atom, ...], ...] = ((),)
    for conj in dnf:
        choices = tuple((a.negated(),) for a in conj)
        out = tuple(x + y for x in out for y in choices)[:MAX_CONJUNCTIONS]
    return out


def _merge_all(values: list[Value]) -> Value:
    known = [v for v in values if v is not None]
    if not known:
        return None
    first = known[0]
    if all(v == first for v in known):
        return first
    if isinstance(first, Tup) and _all_of(known, Tup) and all(len(v.items) == len(first.items) for v in known):
        return Tup(tuple(_merge_all([v.items[i] for v in known]) if all(v.items[i] == first.items[i] for v in known)
                         else None for i in range(len(first.items))))
    return None


# --- entry point ----------------------------------------------------------------------------------

def read_thresholds(repo_root: Path, spec_file: str, spec_name: str, inputs: Mapping[str, tuple[str | int, ...]],
                    dim_args: Iterable[str] = (), python_path: Iterable[str] = ("",),
                    source: str | None = None) -> Reading:
    """The size thresholds of the spec ``spec_file::spec_name`` (its candidate and what it calls).
    ``inputs``: each tensor input's shape (dim names or ints); ``source``: the spec module's text
    where it is not the repository's file (the base's spec, in a pull request)."""
    roots = [*python_path, "", posixpath.dirname(spec_file)]
    reader = Reader(repo_root, roots)
    dotted = spec_file[:-3].replace("/", ".") if spec_file.endswith(".py") else spec_file
    mod = reader.load(spec_file, dotted, source)
    if mod is None:
        return Reading([], [], f"cannot read the spec module {spec_file}")
    candidate = _candidate(mod, spec_name)
    if candidate is None:
        return Reading([], [spec_file], f"no @gg.spec function {spec_name!r} in {spec_file}")
    env: dict[str, Value] = {}
    for name, shape in inputs.items():
        env[name] = Tens(Shape(tuple(Sym(("dim", d)) if isinstance(d, str) else const(int(d)) for d in shape)))
    for d in dim_args:
        env[d] = Sym(("dim", d))
    frame = Frame(reader, mod, env, 0)
    frame.block(candidate.body)
    files = sorted(p for p, m in reader.modules.items() if m is not None)
    return Reading(list(reader.found.values()), files)


def _candidate(mod: Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    aliases = dict(pyscan.import_aliases(mod.tree))
    for fn in pyscan.functions(mod.tree):
        for d in fn.decorator_list:
            if not discovery.is_spec_decorator(pyscan.qualified_name(d, aliases)):
                continue
            named = next((k.value for k in getattr(d, "keywords", []) if k.arg == "name"), None)
            sname = named.value if isinstance(named, ast.Constant) and isinstance(named.value, str) else fn.name
            if sname == name:
                return fn
    return None
