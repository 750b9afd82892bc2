"""The ``gate-aware`` rule: kernel and wrapper code of the change that looks at the process it runs in.

A kernel that behaves only while it is watched passes any test: it needs only to recognise the test's
process (gpu-gate's modules loaded, the worker's command line, the sandbox's PID 1, its own PID, the
variables a runner sets). Kernel and wrapper code has no business reading any of that, so a read the
change adds is a blocking finding, with its line. A read the base's code of the same file already has
(the same statement) is the repository's debt: shown, not blocking. The worker's process is made
unrecognisable as well (see ``gpu_gate.worker.disguise``); this rule names the attempt.

Reads that are spelt out of pieces (``getattr(sys, "mod" + "ules")``) are not seen here: the disguised
worker and the disguised replay are what catch those.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable, Iterable

from .findings import Finding, Severity

KIND = "gate-aware"

# (module, attribute) reads that tell a process apart from a user's own run.
_ATTRS: dict[tuple[str, str], str] = {
    ("sys", "modules"): "reads sys.modules",
    ("sys", "argv"): "reads sys.argv",
    ("sys", "orig_argv"): "reads sys.orig_argv",
    ("sys", "_getframe"): "reads the call stack",
    ("inspect", "stack"): "reads the call stack",
    ("inspect", "currentframe"): "reads the call stack",
    ("inspect", "getouterframes"): "reads the call stack",
    ("traceback", "extract_stack"): "reads the call stack",
    ("os", "environ"): "reads environment variables",
    ("os", "environb"): "reads environment variables",
    ("os", "getenv"): "reads environment variables",
    ("os", "getpid"): "reads a process id",
    ("os", "getppid"): "reads a process id",
    ("os", "getpgid"): "reads a process id",
    ("os", "getpgrp"): "reads a process id",
    ("os", "getsid"): "reads a process id",
}
_MODULES = {"psutil": "reads the process table", "__main__": "reads the main program"}
_GATE_NAME = re.compile(r"gpu[_-]?(kernel[_-]?)?gate", re.IGNORECASE)
_PROC = re.compile(r"/proc/(self|thread-self|\d+|\{|%)")
# CUDA and C++ sources: the same reads, by text (comments stripped first).
_C_READS = ((re.compile(r"\b(secure_)?getenv\s*\("), "reads environment variables"),
            (re.compile(r"\benviron\b"), "reads environment variables"),
            (re.compile(r"\bget(p|pp)id\s*\("), "reads a process id"),
            (re.compile(r"/proc/"), "reads /proc"),
            (_GATE_NAME, "names gpu-gate"))


@dataclasses.dataclass(frozen=True)
class Read:
    """One read of the process's identity: where, what, and the statement's text (compared with the base's)."""

    line: int
    what: str
    statement: str


def python_reads(source: str) -> list[Read]:
    """The reads in a Python module (none where it does not parse: that is another finding's)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    aliases = _aliases(tree)
    found: list[Read] = []
    for stmt in _statements(tree):
        text = _statement_text(stmt)
        for node in _own_nodes(stmt):
            what = _node_read(node, aliases)
            if what is not None:
                found.append(Read(getattr(node, "lineno", stmt.lineno), what, text))
    return _unique(found)


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound to the modules or attributes of interest (``import os as o``, ``from sys import argv``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _statements(tree: ast.AST) -> Iterable[ast.stmt]:
    """Every statement but definitions (their bodies are looked at statement by statement) and bare
    strings (a docstring that names gpu-gate runs nothing)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, ast.stmt):
            yield node


def _own_nodes(stmt: ast.stmt) -> Iterable[ast.AST]:
    """The nodes of a statement, not those of the statements nested in it (each is looked at itself)."""
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.stmt))


def _statement_text(stmt: ast.stmt) -> str:
    """The statement itself, without what it nests (an ``if`` is compared by its test, not its body)."""
    if isinstance(stmt, (ast.If, ast.While)):
        return f"{type(stmt).__name__}: {ast.unparse(stmt.test)}"
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return f"for {ast.unparse(stmt.target)} in {ast.unparse(stmt.iter)}"
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return "with " + ", ".join(ast.unparse(i) for i in stmt.items)
    if isinstance(stmt, ast.Try):
        return "try"
    return ast.unparse(stmt)


def _node_read(node: ast.AST, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module = aliases.get(node.value.id, node.value.id)
        return _ATTRS.get((module, node.attr))
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        full = aliases.get(node.id, "")
        if "." in full:
            module, _, attr = full.rpartition(".")
            return _ATTRS.get((module, attr))
        return None
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _import_read(node)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _GATE_NAME.search(node.value):
            return "names gpu-gate"
        if _PROC.search(node.value) or node.value.rstrip("/") == "/proc":
            return "reads /proc"
    return None


def _import_read(node: ast.Import | ast.ImportFrom) -> str | None:
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    for name in names:
        top = name.split(".")[0]
        if _GATE_NAME.search(top):
            return "names gpu-gate"
        if top in _MODULES:
            return _MODULES[top]
    return None


def c_reads(source: str) -> list[Read]:
    """The reads in a CUDA or C++ source, by text (comments stripped)."""
    found: list[Read] = []
    for number, line in enumerate(_strip_c_comments(source).splitlines(), start=1):
        for pattern, what in _C_READS:
            if pattern.search(line):
                found.append(Read(number, what, " ".join(line.split())))
    return _unique(found)


def _strip_c_comments(source: str) -> str:
    """Comments blanked, line numbers kept."""
    def blank(m: re.Match[str]) -> str:
        return "".join(c if c == "\n" else " " for c in m.group(0))

    return re.sub(r"/\*.*?\*/|//[^\n]*", blank, source, flags=re.DOTALL)


def _unique(reads: list[Read]) -> list[Read]:
    seen: dict[tuple[int, str, str], Read] = {}
    for r in reads:
        seen.setdefault((r.line, r.what, r.statement), r)
    return list(seen.values())


def reads_of(path: str, source: str) -> list[Read]:
    return python_reads(source) if path.endswith(".py") else c_reads(source)


def findings(files: Iterable[tuple[str, str | None]], head: Callable[[str], bytes | None],
             base: Callable[[str], bytes | None]) -> list[Finding]:
    """``files``: (path at head, its path at the base or None where it is new); ``head``/``base`` read a file."""
    out: list[Finding] = []
    for path, old in files:
        data = head(path)
        if data is None:
            continue
        before = base(old) if old is not None else None
        known = {(r.what, r.statement) for r in reads_of(old or path, _text(before))} if before is not None else set()
        for r in reads_of(path, _text(data)):
            out.append(_finding(path, r, pre_existing=(r.what, r.statement) in known))
    return out


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _finding(path: str, read: Read, *, pre_existing: bool) -> Finding:
    if pre_existing:
        return Finding(check="gate", kind=KIND, severity=Severity.WARNING, file=path, line=read.line,
                       message=f"{path}:{read.line}: {read.what} ({read.statement[:120]}); the base's code has "
                               f"the same read, so it is the repository's debt, not this change's",
                       details={"change": "pre-existing", "read": read.what})
    return Finding(check="gate", kind=KIND, severity=Severity.ERROR, file=path, line=read.line,
                   message=f"{path}:{read.line}: kernel or wrapper code that {read.what} ({read.statement[:120]}) "
                           f"can tell a test from a real run and behave only while tested; remove the read "
                           f"(pass what the kernel needs as an argument)",
                   details={"change": "new", "read": read.what})
