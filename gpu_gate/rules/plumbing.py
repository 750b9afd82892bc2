"""When the base's spec cannot call the head's kernel (its call raises TypeError, or it does not import
at the head), the head's spec may adapt only the plumbing: the call expression and argument names.

Checked on the syntax tree, the head's spec against the base's:
- every keyword of ``@gg.spec`` but ``reference``, ``name`` and ``covers`` is the base's (``params=``,
  inputs, dims, dtypes, tolerance, checks, ...): the reference may differ only where it agrees with
  the base's on the same inputs, which the job checks (``reference_changed``);
- the candidate function takes the same arguments, carries the same other decorators, and its body is
  the base's but for one call: the statement that calls the kernel, whose callee is a name the module
  imports and whose arguments are the function's own arguments, constants, or their shapes, strides
  and dtypes; no statement follows the call but the base's own ``return`` of the names it bound, so
  nothing writes the outputs after the kernel did;
- whatever else of the spec module the candidate uses is the base's;
- the head's module runs in the candidate's worker (its imports are what the head's call needs), so
  beside its imports and spec functions every statement of it is the base's, and what the spec
  functions evaluate when the module imports (decorators, their keywords, default arguments) is the
  base's or inert (literals, names, lambdas, ``gg.*`` constructors): nothing in the spec module
  patches the kernel, or what it returns, before the call. What its imports run is code under review
  like the kernel's own module.
Whatever is not plumbing is a reason; none means the base's spec judges with the head's call.
"""
from __future__ import annotations

import ast
import collections
from typing import TypeGuard

from .. import discovery, pyscan
from .specrules import SpecRules

_FREE_KEYWORDS = frozenset({"reference", "name", "covers"})
_META_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "layout"})
_META_METHODS = frozenset({"size", "stride", "numel", "dim", "element_size", "storage_offset", "is_contiguous",
                           "data_ptr"})


def differences(base: SpecRules, head: SpecRules, index: pyscan.ModuleIndex | None = None) -> list[str]:
    """What the head's spec changes beyond the call to the kernel (empty: plumbing only)."""
    out = [f"{key}= differs from the base's" for key in sorted((set(base.keywords) | set(head.keywords))
                                                                 - _FREE_KEYWORDS)
           if base.shape(key) != head.shape(key)]
    out += _function(base, head, index)
    return out + _module(base, head)


def between_sources(file: str, name: str, base_source: str, head_source: str) -> list[str]:
    """``differences`` for one spec given as two versions of its module (``gpu-gate repro --base``)."""
    from .specrules import specs_in_source

    try:
        old = next(s for s in specs_in_source(base_source, file) if s.name == name)
        new = next(s for s in specs_in_source(head_source, file) if s.name == name)
    except (StopIteration, pyscan.ParseError):
        return [f"the spec {name} was not found in both versions of {file}"]
    return differences(old, new)


def _function(base: SpecRules, head: SpecRules, index: pyscan.ModuleIndex | None) -> list[str]:
    old, new = base.candidate, head.candidate
    if ast.dump(old.args) != ast.dump(new.args):
        return ["the spec function's arguments differ from the base's"]
    if _other_decorators(base) != _other_decorators(head):
        return ["the spec function's other decorators differ from the base's"]
    out = _statements(_body(old), _body(new), base, head, index)
    if _used(base) != _used(head):
        out.append("the spec module's functions or values that the spec function uses differ from the base's")
    return out


def _module(base: SpecRules, head: SpecRules) -> list[str]:
    """What the head's spec module runs when the candidate's worker imports it, beyond the base's."""
    old = collections.Counter(ast.dump(s) for s in base.module.body if not _import(s) and not _spec_def(s, base))
    known = _evaluated(base)
    out = []
    for stmt in head.module.body:
        if _import(stmt):
            continue
        if _spec_def(stmt, head):
            out += [f"the spec module's {stmt.name} evaluates {_short(ast.unparse(e))} when it imports, which is not "
                    f"the base's (it runs in the candidate's worker before the call)"
                    for e in _evaluated_by(stmt) if ast.dump(e) not in known and not _inert(e, head)]
            continue
        if old[ast.dump(stmt)] > 0:
            old[ast.dump(stmt)] -= 1
            continue
        out.append(f"the spec module's statement at line {stmt.lineno} ({_short(ast.unparse(stmt))}) is not the "
                   f"base's (it runs in the candidate's worker before the call)")
    return out


def _import(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.Import, ast.ImportFrom))


def _spec_def(stmt: ast.stmt, spec: SpecRules) -> TypeGuard[ast.FunctionDef | ast.AsyncFunctionDef]:
    return isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        discovery.is_spec_decorator(pyscan.qualified_name(d, spec.aliases)) for d in stmt.decorator_list)


def _evaluated_by(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    """What defining ``fn`` evaluates: its decorators (a spec decorator's arguments one by one), default
    arguments and annotations."""
    out: list[ast.expr] = []
    for d in fn.decorator_list:
        if isinstance(d, ast.Call):
            out += [d.func, *d.args, *(k.value for k in d.keywords)]
        else:
            out.append(d)
    a = fn.args
    out += [*a.defaults, *(d for d in a.kw_defaults if d is not None)]
    out += [x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            if x is not None and x.annotation is not None]
    return out + ([fn.returns] if fn.returns is not None else [])


def _evaluated(spec: SpecRules) -> set[str]:
    return {ast.dump(e) for s in spec.module.body if _spec_def(s, spec) for e in _evaluated_by(s)}


def _inert(node: ast.expr, spec: SpecRules) -> bool:
    """Evaluating ``node`` runs nothing of the repository's: literals, names and attributes, containers,
    lambdas (whose bodies run later, in the reference's worker, and whose defaults are inert too), and
    gpu_gate's own constructors (``gg.Tolerance(...)``)."""
    if isinstance(node, ast.Lambda):
        return all(_inert(d, spec) for d in [*node.args.defaults, *(d for d in node.args.kw_defaults if d)])
    if isinstance(node, ast.Call):
        name = pyscan.qualified_name(node.func, spec.aliases) or ""
        return name.startswith("gpu_gate.") and all(_inert(a, spec) for a in [*node.args,
                                                                              *(k.value for k in node.keywords)])
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, (ast.Attribute, ast.Starred)):
        return _inert(node.value, spec)
    if isinstance(node, ast.Subscript):
        return _inert(node.value, spec) and _inert(node.slice, spec)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_inert(e, spec) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(_inert(e, spec) for e in [*(k for k in node.keys if k is not None), *node.values])
    if isinstance(node, ast.UnaryOp):
        return _inert(node.operand, spec)
    if isinstance(node, ast.BinOp):
        return _inert(node.left, spec) and _inert(node.right, spec)
    return False


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 80 else line[:77] + "..."


def _statements(old: list[ast.stmt], new: list[ast.stmt], base: SpecRules, head: SpecRules,
                index: pyscan.ModuleIndex | None) -> list[str]:
    """The head's body is the base's up to the call, the call, then the base's rest or a bare return."""
    dumps_old, dumps_new = [ast.dump(s) for s in old], [ast.dump(s) for s in new]
    if dumps_old == dumps_new:
        return []
    i = next(k for k in range(len(new) + 1) if k == len(new) or k == len(old) or dumps_old[k] != dumps_new[k])
    if i == len(new) or i == len(old):
        return ["the spec function's body has other statements than the base's (only the call may change)"]
    out = _call_statement(old[i], new[i], base, head, index)
    rest = new[i + 1:]
    if dumps_new[i + 1:] != dumps_old[i + 1:] and not all(_returns_names(s) for s in rest):
        out.append("statements after the call to the kernel (nothing may follow it but a return of what it bound, "
                   "so nothing writes the outputs after the kernel did)")
    return out


def _body(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    return body


def _other_decorators(spec: SpecRules) -> list[str]:
    return [ast.dump(d) for d in spec.candidate.decorator_list
            if not discovery.is_spec_decorator(pyscan.qualified_name(d, spec.aliases))]


def _used(spec: SpecRules) -> list[str]:
    return sorted(ast.dump(s) for s in spec.local_functions(spec.candidate))


def _returns_names(stmt: ast.stmt) -> bool:
    value = stmt.value if isinstance(stmt, ast.Return) else None
    elts = value.elts if isinstance(value, ast.Tuple) else [value] if value is not None else []
    return isinstance(stmt, ast.Return) and all(isinstance(e, ast.Name) for e in elts)


def _call_statement(old: ast.stmt, new: ast.stmt, base: SpecRules, head: SpecRules,
                    index: pyscan.ModuleIndex | None) -> list[str]:
    """The first statement that changed: a call whose result is returned, bound to names, or dropped."""
    a, b = _call_of(old), _call_of(new)
    if b is None or a is None:
        return [f"the spec function's statement {ast.unparse(new)!r} is not the base's call to the kernel "
                f"(only the call may change)"]
    return _call(a, b, base, head, index)


def _call_of(stmt: ast.stmt) -> ast.Call | None:
    if isinstance(stmt, ast.Assign) and not all(isinstance(t, (ast.Name, ast.Tuple)) for t in stmt.targets):
        return None  # `out[:] = ...`: a write, not a binding
    value = stmt.value if isinstance(stmt, (ast.Return, ast.Assign, ast.Expr)) else None
    return value if isinstance(value, ast.Call) else None


def _call(old: ast.Call, call: ast.Call, base: SpecRules, head: SpecRules,
          index: pyscan.ModuleIndex | None) -> list[str]:
    params = {a.arg for a in [*head.candidate.args.posonlyargs, *head.candidate.args.args,
                              *head.candidate.args.kwonlyargs]}
    out = []
    if not _callee(call.func, head) or not (_same_callee(old, call, base, head) or _repository(call.func, head,
                                                                                                  index)):
        out.append(f"the call's callee ({ast.unparse(call.func)}) is not the base's, nor a name the spec module "
                   f"imports from the repository")
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        value = arg.value if isinstance(arg, ast.Starred) else arg
        if not _argument(value, params, head):
            out.append(f"the call passes {ast.unparse(value)}, which is not one of the function's arguments, a "
                       f"constant, or their shape, stride or dtype")
    return out


def _same_callee(old: ast.Call, new: ast.Call, base: SpecRules, head: SpecRules) -> bool:
    return pyscan.qualified_name(old.func, base.aliases) == pyscan.qualified_name(new.func, head.aliases)


def _repository(func: ast.expr, head: SpecRules, index: pyscan.ModuleIndex | None) -> bool:
    """The callee comes from a module of the repository (the code under review), not a package: a call
    to torch itself would judge torch, not the kernel."""
    return index is not None and bool(head.modules_used(func.value if isinstance(func, ast.Subscript) else func,
                                                        index))


def _callee(node: ast.expr, head: SpecRules) -> bool:
    """A name imported by the spec module (or an attribute of one, or a Triton launch of one), never a
    name the module defines or rebinds: a function of the spec's own would be code run after the kernel."""
    if isinstance(node, ast.Subscript):
        return _callee(node.value, head)
    return _imported_root(node, head)


def _imported_root(node: ast.expr, head: SpecRules) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in head.aliases and node.id not in _bound(head)


def _bound(head: SpecRules) -> set[str]:
    """Names the spec module binds other than by import."""
    out = {s.name for s in head.module.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for s in ast.walk(head.module):
        targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(
            s, (ast.AnnAssign, ast.AugAssign, ast.For, ast.NamedExpr)) else []
        out |= {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
    return out


def _argument(node: ast.expr, params: set[str], head: SpecRules) -> bool:
    """Passed through (an argument), a constant, a module's attribute (``torch.float32``), or a tensor's
    metadata: nothing that computes on the data."""
    if isinstance(node, ast.Name):
        return node.id in params
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_argument(e, params, head) for e in node.elts)
    return _constant(node) or _module_attribute(node, head) or _metadata(node, params)


def _constant(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _constant(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_constant(e) for e in node.elts)
    return isinstance(node, ast.Constant)


def _module_attribute(node: ast.expr, head: SpecRules) -> bool:
    """``torch.float32``: a value of an imported module, read, not called."""
    return isinstance(node, ast.Attribute) and _imported_root(node, head)


def _metadata(node: ast.expr, params: set[str]) -> bool:
    """``x.shape[0]``, ``x.stride(1)``, ``x.numel() // 4``, ``x.dtype``: read from the arguments, not computed on."""
    if isinstance(node, ast.Attribute):
        return node.attr in _META_ATTRS and isinstance(node.value, ast.Name) and node.value.id in params
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.keywords:
        return (node.func.attr in _META_METHODS and isinstance(node.func.value, ast.Name)
                and node.func.value.id in params and all(_number(a, params) for a in node.args))
    return isinstance(node, (ast.Subscript, ast.BinOp)) and _number(node, params)


def _number(node: ast.expr, params: set[str]) -> bool:
    if _constant(node):
        return True
    if isinstance(node, ast.Subscript):
        return _metadata(node.value, params) and _number(node.slice, params)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
        return _number(node.left, params) and _number(node.right, params)
    return isinstance(node, (ast.Attribute, ast.Call)) and _metadata(node, params)
