"""Compiled GPU artefacts in the repository: kernels whose source gpu-gate cannot read.

A ``.so`` loaded through ``ctypes``, a ``.cubin``, ``.ptx``, ``.fatbin`` or ``.hsaco`` handed to the
driver: a pull request that changes one changes GPU code as surely as one that edits a ``.cu``. Under
the kernel globs (matched by an include pattern, or in a directory one reaches, and not excluded)
such a file is a kernel of an ``unrecognised`` language: the specs that cover it (``covers=``, or
seen to load it: :mod:`gpu_gate.read_files`) run, and an ``unrecognised-kernel`` finding says
gpu-gate cannot tell which kernels in it changed (``unrecognised: fail`` blocks by default).
"""
from __future__ import annotations

import posixpath
from collections.abc import Iterable

from .findings import Finding, Severity
from .git import FileChange
from .record import ChangedKernel

SUFFIXES = (".so", ".cubin", ".ptx", ".fatbin", ".hsaco")
LANGUAGE = "unrecognised"


def is_artefact(path: str) -> bool:
    name = posixpath.basename(path)
    return name.endswith(SUFFIXES) or ".so." in name  # libk.so.1


def under_globs(path: str, include: Iterable[str], exclude: Iterable[str]) -> bool:
    from .changes import matcher, may_contain

    if matcher(exclude)(path):
        return False
    return matcher(include)(path) or any(may_contain(p, posixpath.dirname(path)) for p in include)


def changed(files: Iterable[FileChange], include: Iterable[str], exclude: Iterable[str],
            status: dict[str, str]) -> tuple[dict[str, ChangedKernel], list[Finding]]:
    """The artefacts this change touched under the kernel globs, and a finding for each one still there."""
    include, exclude = list(include), list(exclude)
    kernels: dict[str, ChangedKernel] = {}
    findings: list[Finding] = []
    for f in files:
        if f.gitlink is not None or not is_artefact(f.path) or not under_globs(f.path, include, exclude):
            continue
        kernels[f.path] = ChangedKernel(f.path, LANGUAGE, status[f.status])
        if f.status != "deleted":
            findings.append(finding(f.path))
    return kernels, findings


def finding(path: str) -> Finding:
    from .changes import UNRECOGNISED

    kind = path.rsplit(".", 1)[-1] if not posixpath.basename(path).count(".so.") else "so"
    return Finding(
        check="changes", kind=UNRECOGNISED, severity=Severity.ERROR, file=path,
        details={"artefact": kind},
        message=(f"{path} is a compiled GPU artefact (.{kind}) under kernels.include: gpu-gate cannot read which "
                 f"kernels in it changed; build it from source in the repository (the source is then the kernel), "
                 f"or name it in the covers= of a gate spec that loads it and set `unrecognised: warn` in the base "
                 f"policy"))
