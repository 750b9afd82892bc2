"""Run a command with no token in its environment: ``python -m gpu_gate.github.sealed CMD ARGS...``.

A step that runs the repository's code (the ``setup`` commands, ``gpu-gate check``) must hold
no token in any process's environment. Removing a variable inside a running process is not
enough: ``/proc/<pid>/environ`` still shows the environment the process started with. So the
step replaces itself (``exec``) with the command, started afresh with :func:`scrubbed_env`.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from ..proc import RUNNER_COMMAND_FILES, scrubbed_env


def dropped(env: Mapping[str, str]) -> list[str]:
    """The secrets :func:`scrubbed_env` removes from ``env``, sorted (the runner's command files,
    removed too, are no secret)."""
    kept = scrubbed_env(env)
    return sorted(name for name in env if name not in kept and name not in RUNNER_COMMAND_FILES)


def sealed_env(env: Mapping[str, str], keep: Sequence[str] = ()) -> dict[str, str]:
    """``env`` without secrets or the runner's command files (but those in ``keep``), with this
    interpreter's directory first on PATH (so that ``python`` and ``pip`` in a setup command mean
    the interpreter gpu-gate runs with)."""
    out = scrubbed_env(env)
    out.update({name: env[name] for name in keep if name in env and name in RUNNER_COMMAND_FILES})
    bindir = os.path.dirname(sys.executable)
    out["PATH"] = os.pathsep.join([bindir, *(p for p in out.get("PATH", "").split(os.pathsep) if p and p != bindir)])
    return out


def warn_dropped(names: Sequence[str]) -> None:
    if names:
        print(f"::warning title=gpu-gate::removed {', '.join(names)} from the environment of a step that runs "
              "the repository's code; do not set tokens in a workflow's or job's `env:`", flush=True)


def exec_sealed(argv: Sequence[str], keep: Sequence[str] = ()) -> None:
    """Replace this process with ``argv`` in a sealed environment (never returns)."""
    warn_dropped(dropped(os.environ))
    env = sealed_env(os.environ, keep)
    os.execvpe(argv[0], list(argv), env)


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m gpu_gate.github.sealed COMMAND [ARGS...]", file=sys.stderr)
        return 2
    try:
        exec_sealed(argv)
    except OSError as exc:
        print(f"::error title=gpu-gate::cannot run {argv[0]}: {exc.strerror}", flush=True)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
