"""Findings from the compiled code of each kernel the compile check builds: races through
global memory that compute-sanitizer cannot see (see :mod:`gpu_gate.judge.compiled.ptxlint`). The PTX is
that of the toolchain in use, since compilers differ: Triton 3.9 puts a barrier before a scalar
atomic release by itself, Triton 3.6 does not."""
from __future__ import annotations

import os
from pathlib import Path

from ..compiled import ptxlint
from ...findings import Finding, Severity

CHECK = "compile"


def findings_from_ptx(ptx: str, rel: str, repo_root: Path, arch: str) -> list[Finding]:
    out = []
    for hit in ptxlint.lint(ptx):
        file = relative_path(hit.file, repo_root) or rel
        where = f"{file}:{hit.line}" if hit.line else f"{rel} ({hit.kernel})"
        if hit.kind == "lock-release-without-barrier" and hit.flag:
            missing = " and ".join(w for w, ok in (("no block barrier", hit.barrier), ("no fence", hit.fence))
                                   if not ok)
            msg = (f"{where}: kernel {hit.kernel} sets a flag that its programs poll right after its global stores, "
                   f"with {missing} between them ({arch}): a program that sees the flag may read the results before "
                   f"they land (put a barrier and a release before the flag: tl.debug_barrier() then "
                   f"tl.atomic_xchg(flag, 1) in Triton; __syncthreads() then __threadfence() before the store, or "
                   f"cuda::atomic_ref store with memory_order_release, in CUDA)")
            severity = Severity.ERROR
        elif hit.kind == "lock-release-without-barrier":
            msg = (f"{where}: kernel {hit.kernel} releases a lock with an atomic exchange right after its global "
                   f"stores, with no block barrier between them ({arch}): the other threads' stores may land after "
                   f"the next program took the lock (put a barrier before the release: tl.debug_barrier() in Triton, "
                   f"__syncthreads() in CUDA, with __threadfence() for other blocks)")
            severity = Severity.ERROR
        else:
            msg = (f"{where}: kernel {hit.kernel} reads, changes and writes back global memory at an address computed "
                   f"from a loaded index, without an atomic ({arch}): programs with the same index lose updates "
                   f"(use an atomic add, or make sure indices never repeat)")
            severity = Severity.NOTE
        out.append(Finding(CHECK, hit.kind, msg, severity, file=file, line=hit.line,
                           details={"kernel": hit.kernel, "arch": arch, "ptx": hit.excerpt}))
    return out


def triton_findings(source: str, ptx: str, rel: str, arch: str) -> list[Finding]:
    """A Triton kernel's PTX, linted; ``rel`` is its file, relative to the repository, and
    ``source`` the path its function was defined in, as the compile worker saw it."""
    return findings_from_ptx(ptx, rel, source_root(source, rel), arch)


def source_root(source: str, rel: str) -> Path:
    """The repository a Triton kernel's file ``rel`` (relative to it) was imported from, given the
    path its function was defined in (a fact of the compile worker's, never the function)."""
    source = source or rel
    return Path(source[: -len(rel)]) if source.endswith(rel) else Path(source).parent


def relative_path(path: str | None, repo_root: Path) -> str | None:
    if not path:
        return None
    try:
        return Path(os.path.realpath(path)).relative_to(os.path.realpath(repo_root)).as_posix()
    except ValueError:
        return path if not os.path.isabs(path) else None
