"""Static reading of Python sources: Triton kernels, gate specs' decorators, imports.

Everything works on the syntax tree. Names are resolved through the file's own
import statements, so ``import triton as tt; @tt.jit`` is a kernel while
``from numba import jit; @jit`` is not, and the text "triton.jit" in a string or
a comment never is.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import posixpath
from collections.abc import Iterable

TRITON_DECORATORS = frozenset({
    "triton.jit",
    "triton.autotune",
    "triton.heuristics",
    "triton.runtime.jit",
    "triton.runtime.jit.jit",
    "triton.runtime.autotune",
    "triton.runtime.heuristics",
    "triton.runtime.autotuner.autotune",
    "triton.runtime.autotuner.heuristics",
    "triton.experimental.gluon.jit",
    "triton.experimental.gluon._runtime.jit",
})


@dataclasses.dataclass(frozen=True)
class TritonKernel:
    name: str
    line: int
    decorators: tuple[str, ...]  # the Triton decorators, fully qualified ("triton.autotune", "triton.jit")


class ParseError(ValueError):
    """A Python file that does not parse. ``str()`` is ``file:line: cannot parse Python: msg``."""

    def __init__(self, file: str, line: int, msg: str) -> None:
        self.file, self.line, self.msg = file, line, msg
        super().__init__(f"{file}:{line}: cannot parse Python: {msg}")


# Parsed modules by content and name: a run reads the same files several times (the change's
# import graph, the specs at the head, the result cache's keys), and parsing is most of what a run
# served from the cache spends. Keyed by a digest of the bytes, so an edited file is parsed again.
# The trees are shared: nothing may change them.
_PARSED: dict[tuple[bytes, str], ast.Module] = {}
_PARSED_MAX = 8192


def parse(source: str | bytes, filename: str) -> ast.Module:
    """Parse a module (bytes honour a PEP 263 coding line); raise :class:`ParseError`."""
    data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else bytes(source)
    key = (hashlib.blake2b(data, digest_size=16, person=b"str" if isinstance(source, str) else b"bytes").digest(),
           filename)
    tree = _PARSED.get(key)
    if tree is not None:
        return tree
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise ParseError(filename, exc.lineno or 1, exc.msg) from None
    except ValueError as exc:  # NUL bytes, undecodable text
        raise ParseError(filename, 1, str(exc)) from None
    if len(_PARSED) < _PARSED_MAX:
        _PARSED[key] = tree
    return tree


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the fully qualified name it is bound to by import statements."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:  # `import a.b` binds `a`
                    top = a.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def qualified_name(expr: ast.expr, aliases: dict[str, str]) -> str | None:
    """``tt.runtime.jit`` -> ``triton.runtime.jit`` given ``import triton as tt``; calls are unwrapped."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or expr.id not in aliases:
        return None
    return ".".join([aliases[expr.id], *reversed(parts)])


def functions(tree: ast.Module) -> Iterable[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def triton_kernels(tree: ast.Module) -> list[TritonKernel]:
    aliases = import_aliases(tree)
    found: list[TritonKernel] = []
    for fn in functions(tree):
        names = tuple(q for q in (qualified_name(d, aliases) for d in fn.decorator_list) if q in TRITON_DECORATORS)
        if names:
            line = fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno
            found.append(TritonKernel(fn.name, line, names))
    return sorted(found, key=lambda k: k.line)


def find_triton_kernels(source: str | bytes, filename: str) -> list[TritonKernel]:
    """Functions decorated with a Triton decorator; raises :class:`ParseError`."""
    return triton_kernels(parse(source, filename))


# --- imports -> repository files ----------------------------------------------------------

class ModuleIndex:
    """Maps module names to repository files, for flat and ``src/`` layouts alike."""

    def __init__(self, files: Iterable[str]) -> None:
        self.files = frozenset(f for f in files if f.endswith(".py"))
        self.roots = _import_roots(self.files)

    def module_files(self, dotted: str) -> list[str]:
        """The files a module name may live in: its module file and its packages' ``__init__.py``."""
        parts = dotted.split(".")
        for root in self.roots:
            hits = self._under(root, parts)
            if hits:
                return hits
        return []

    def _under(self, root: str, parts: list[str]) -> list[str]:
        hits: list[str] = []
        for i in range(1, len(parts) + 1):
            base = posixpath.join(root, *parts[:i])
            for cand in (base + ".py", base + "/__init__.py"):
                if cand in self.files:
                    hits.append(cand)
        last = posixpath.join(root, *parts)
        # Only a hit on the full name counts: `import a.b` must not match a stray `a.py`.
        return hits if (last + ".py" in self.files or last + "/__init__.py" in self.files) else []


def _import_roots(files: frozenset[str]) -> list[str]:
    """Directories that may hold top-level packages: the repo root, then e.g. ``src``.

    The parent of the outermost regular package (one with ``__init__.py``), and every directory
    above it: the top of a package may be a namespace package without ``__init__.py`` (PEP 420;
    Liger-Kernel's ``src/liger_kernel`` until late 2024), so ``src/liger_kernel/ops/__init__.py``
    is ``liger_kernel.ops`` under ``src``. A root that holds no such module path finds nothing, so
    the extra ones only add files that exist."""
    roots: set[str] = set()
    for f in files:
        if posixpath.basename(f) != "__init__.py":
            continue
        pkg = posixpath.dirname(f)
        parent = posixpath.dirname(pkg)
        if posixpath.join(parent, "__init__.py") in files:
            continue
        while parent and parent not in roots:
            roots.add(parent)
            parent = posixpath.dirname(parent)
    return [""] + sorted(roots)


def imported_names(tree: ast.Module, module_path: str) -> set[str]:
    """Absolute dotted names a module imports (relative imports resolved against its path)."""
    memo: dict[str, frozenset[str]] = tree.__dict__.setdefault("_gg_imported", {})
    if module_path not in memo:
        memo[module_path] = frozenset(_imported_names(tree, module_path))
    return set(memo[module_path])


def _imported_names(tree: ast.Module, module_path: str) -> set[str]:
    package = _package_of(module_path)
    names: set[str] = set()
    imports, literals, _ = _read(tree)
    for node in imports:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        else:
            base = _absolute(node.module, node.level, package)
            if base is None:
                continue
            if base:
                names.add(base)
            # `from pkg import x` may name a submodule x; a miss is harmless.
            names.update(f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*")
    return names | literals


def _read(tree: ast.Module) -> tuple[list[ast.Import | ast.ImportFrom], frozenset[str], frozenset[str]]:
    """One walk of a module, kept on it: its import statements, the modules it imports by a literal
    name (``importlib.import_module("a.b")``), and its string constants."""
    memo = tree.__dict__.get("_gg_read")
    if memo is None:
        imports: list[ast.Import | ast.ImportFrom] = []
        literals: set[str] = set()
        strings: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant):
                if isinstance(node.value, str):
                    strings.add(node.value)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append(node)
            elif isinstance(node, ast.Call):
                literal = _import_module_literal(node)
                if literal:
                    literals.add(literal)
        memo = (imports, frozenset(literals), frozenset(strings))
        tree.__dict__["_gg_read"] = memo
    return memo


def module_imports(source: str | bytes | ast.Module, module_path: str, index: ModuleIndex) -> set[str]:
    """Repository files (``.py``) that this module imports directly."""
    tree = source if isinstance(source, ast.Module) else parse(source, module_path)
    return files_of(imported_names(tree, module_path), module_path, index)


def files_of(names: Iterable[str], module_path: str, index: ModuleIndex) -> set[str]:
    """Repository files (``.py``) that the dotted ``names`` a module imports resolve to, the
    module itself left out."""
    files = {f for name in names for f in index.module_files(name)}
    files.discard(module_path)
    return files


def _package_of(module_path: str) -> list[str]:
    """Package parts of a file path (``pkg/sub/mod.py`` -> ``[pkg, sub]``); roots are stripped later."""
    return [p for p in posixpath.dirname(module_path).split("/") if p]


def _absolute(module: str | None, level: int, package: list[str]) -> str | None:
    if not level:
        return module or None
    if level - 1 > len(package):
        return None  # beyond the top: the import would fail at run time
    parts = package[: len(package) - (level - 1)]
    if module:
        parts = [*parts, *module.split(".")]
    return ".".join(parts)


def _import_module_literal(call: ast.Call) -> str | None:
    """``importlib.import_module("a.b")`` / ``__import__("a.b")`` with a literal name."""
    func = call.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__"))
    if named and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value if not call.args[0].value.startswith(".") else None
    return None


def string_literals(tree: ast.Module) -> set[str]:
    return set(_read(tree)[2])
