"""Without a GPU, the Triton specializations the cases launched under the interpreter, compiled for
the lint architecture (sm_90) in a process of their own.

Under ``TRITON_INTERPRET=1`` a ``@triton.jit`` function is an interpreted one: it cannot be compiled
in the worker's process, and the constexprs its launches chose at the call site are known only
there (the compile job, reading the kernel file alone, has "no values known"). So the worker hands
each recorded launch (file, function, constexprs, argument types) to a child process without the
interpreter, which imports the kernel files as the compile job does, compiles each launch with its
values for the lint architecture and answers as :func:`.specializations.compile_launched` does: the
judge reads the PTX for races and 32-bit offsets (:mod:`gpu_gate.judge.checks.compile_launched`).

    python -m gpu_gate.worker.interpreted_builds REQUEST.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .tritonlaunch import Launch

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .tritonc import JitFunction

CHILD_TIMEOUT_S = 600.0


def compile_interpreted(launches: list[tuple[str, Launch]], arch: str, root: Path, python_path: tuple[str, ...],
                        timeout: float = CHILD_TIMEOUT_S) -> dict[str, object]:
    """``compile_launched``'s answer for ``launches`` (recorded under the interpreter), for ``arch``."""
    from .specializations import MAX_COMPILED

    request = {"root": str(root), "python_path": list(python_path), "arch": arch,
               "launches": [{"rel": rel, **launch.to_json(), "file": launch.file} for rel, launch in launches],
               "max": MAX_COMPILED}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory(prefix="gpu-gate-builds-") as tmp:
        path = Path(tmp) / "request.json"
        path.write_text(json.dumps(request))
        try:
            p = subprocess.run([sys.executable, "-m", "gpu_gate.worker.interpreted_builds", str(path)],
                               capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return _not_compiled(len(launches), f"the compile process did not finish: {exc}")
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return _not_compiled(len(launches), f"the compile process failed (exit {p.returncode}): {' | '.join(tail)}")
    try:
        answer = json.loads(lines[-1])
    except ValueError:
        return _not_compiled(len(launches), "the compile process answered with no JSON")
    return answer if isinstance(answer, dict) else _not_compiled(len(launches), "the compile process answered no object")


def _not_compiled(n: int, why: str) -> dict[str, object]:
    return {"rows": [], "errors": [], "ptx": [], "root": "", "ptx_left_out": 0, "not_compiled": n, "why": why}


def _values(constexprs: Mapping[str, object]) -> dict[str, object]:
    """The constexprs as the call passed them: a Triton dtype recorded as its name (``"bf16"``)
    is that dtype again."""
    import triton.language as tl

    names = {str(getattr(tl, n)) for n in dir(tl) if isinstance(getattr(tl, n, None), tl.dtype)}
    return {k: (tl.dtype(v) if isinstance(v, str) and v in names else v) for k, v in constexprs.items()}


def main(argv: list[str] | None = None) -> int:
    from .specializations import compile_launched
    from .tritonc import import_kernels

    argv = sys.argv[1:] if argv is None else argv
    request = json.loads(Path(argv[0]).read_text())
    root = Path(request["root"])
    python_path = tuple(request.get("python_path") or ("",))
    kernels: dict[str, dict[str, JitFunction]] = {}
    launches: list[tuple[str, Launch]] = []
    unknown = 0
    for item in request["launches"][: int(request.get("max") or 16)]:
        file = str(item["file"])
        if file not in kernels:
            try:
                kernels[file] = import_kernels(Path(file), root, python_path)
            except Exception:  # noqa: BLE001 - a file that does not import is reported as not compiled
                kernels[file] = {}
        fn = kernels[file].get(str(item["function"]))
        if fn is None:
            unknown += 1
            continue
        constexprs = dict(item.get("constexprs") or {})
        launches.append((str(item["rel"]), Launch(file, str(item["function"]), constexprs,
                                                  dict(item.get("signature") or {}), dict(item.get("options") or {}),
                                                  fn=fn, count=int(item.get("count") or 1),
                                                  values=_values(constexprs))))
    answer = compile_launched(launches, [str(request["arch"])], root=str(root))
    answer["not_compiled"] = int(answer.get("not_compiled") or 0) + unknown + max(
        0, len(request["launches"]) - int(request.get("max") or 16))
    print(json.dumps(answer, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
