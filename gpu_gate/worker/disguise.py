"""A worker that looks like a user's own process (issue 39, part 1).

A kernel that behaves only while it is tested needs to recognise the test. The worker used to say it
plainly: ``gpu_gate`` and ``gpu_gate.worker.serve`` in ``sys.modules``, a command line naming the
serving module, a ``context.json`` and a role. Now:

- the command line is ``python -I -u -B -`` (with the run's bytecode directory, where there is one):
  the boot program comes on standard input, which it closes before anything else, with the role,
  the socket's descriptor and the worker's context in it (nothing on the command line or on disk);
- the gate's package is loaded under a neutral name (:data:`NEUTRAL`), so no module named
  ``gpu_gate*`` is ever in ``sys.modules`` (its internal imports are relative, so it works as is);
- ``sys.argv`` and ``sys.orig_argv`` read as a user's ``python train.py``;
- the spec's own ``import gpu_gate as gg`` is answered by the spec module's private ``__import__``
  (its ``__builtins__``), from the package already loaded: the kernels it imports see no such module.

What this does not hide (a determined kernel can still look): the files of the gate's installation
(the modules' ``__file__``, the call stack's frames), the sandbox's PID 1 and the worker's PID. Those
reads are the ``gate-aware`` rule's to name (``gpu_gate.gateaware``); a kernel that reads them out of
sight of the rule is what the disguised replay catches (``gpu_gate.judge.disguised``).
"""
from __future__ import annotations

import builtins
import json
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

NEUTRAL = "_kernel_runtime"  # the name the gate's package is loaded under in a worker
SCRIPT = "train.py"  # what the worker's sys.argv says it runs
GATE = "gpu_gate"


def boot_program(gate_dir: Path, fd: int, role: str, context: Mapping[str, object]) -> bytes:
    """The worker's boot program, read by ``python -`` from its standard input: no name of the gate
    in it survives the boot (the text is gone once parsed, and standard input is closed first)."""
    payload = json.dumps({"fd": int(fd), "role": role, "context": context})
    return (
        "import os, sys, importlib.util\n"
        "_null = os.open(os.devnull, os.O_RDONLY)\n"
        "os.dup2(_null, 0)\n"
        "os.close(_null)\n"
        f"_spec = importlib.util.spec_from_file_location({NEUTRAL!r}, {str(gate_dir / '__init__.py')!r},\n"
        f"    submodule_search_locations=[{str(gate_dir)!r}])\n"
        "_pkg = importlib.util.module_from_spec(_spec)\n"
        f"sys.modules[{NEUTRAL!r}] = _pkg\n"
        "_spec.loader.exec_module(_pkg)\n"
        f"sys.argv[:] = [{SCRIPT!r}]\n"
        f"sys.orig_argv[:] = [os.path.basename(sys.executable), {SCRIPT!r}]\n"
        "del _spec, _pkg, _null\n"
        f"importlib.import_module({NEUTRAL + '.worker.serve'!r}).run_boot({payload!r})\n"
    ).encode()


def package() -> types.ModuleType:
    """The gate's top-level package, under whatever name this process loaded it."""
    return sys.modules[__name__.rsplit(".", 2)[0]]


def spec_builtins() -> dict[str, object] | None:
    """The ``__builtins__`` a spec module runs with: its ``import gpu_gate`` (and ``from gpu_gate.x
    import y``) answered from the package already loaded, without a ``gpu_gate`` module in
    ``sys.modules``. None where the package is loaded as ``gpu_gate`` itself (in-process runs)."""
    top = package()
    if top.__name__ == GATE:
        return None
    real = builtins.__import__

    def spec_import(name: str, globals: Mapping[str, object] | None = None, locals: Mapping[str, object] | None = None,
                    fromlist: Sequence[str] = (), level: int = 0) -> types.ModuleType:
        if level == 0 and (name == GATE or name.startswith(GATE + ".")):
            inner = real(top.__name__ + name[len(GATE):], globals, locals, fromlist, 0)
            return inner if fromlist else top
        return real(name, globals, locals, fromlist, level)

    own = dict(vars(builtins))
    own["__import__"] = spec_import
    return own
