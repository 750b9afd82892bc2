"""Findings from the compiled code of each kernel the compile check builds: address offsets
computed in 32 bits, which wrap past 2^31 elements (see :mod:`gpu_gate.judge.compiled.ptx_offsets`).

By absolute rules (a new kernel, ``gpu-gate check --all``) each is a warning: most kernels never
see 2^31 elements, and the repository's policy decides. In a pull request the compile check
compares with the base's build of the same file (:func:`classify`): an offset the change brings
blocks; one the base has too is the repository's debt; one the change removes is reported fixed.
"""
from __future__ import annotations

from pathlib import Path

from ..compiled import ptx_offsets
from ...findings import Finding, Severity
from .compiled_races import CHECK, relative_path

KIND = ptx_offsets.KIND


def findings_from_ptx(ptx: str, rel: str, repo_root: Path, arch: str) -> list[Finding]:
    out = []
    for hit in ptx_offsets.lint(ptx):
        file = relative_path(hit.file, repo_root) or rel
        where = f"{file}:{hit.line}" if hit.line else f"{rel} ({hit.kernel})"
        product = f" (the product: line {hit.product_line})" if hit.product_line else ""
        msg = (f"{where}: kernel {hit.kernel} computes an address offset as a 32-bit product of its program index "
               f"and a runtime value{product} ({arch}): once that product passes 2^31 (tensors of more than 2^31 elements, "
               f"4 GiB in bf16) the offset wraps, to an illegal address or silently to other rows. Widen the index "
               f"before the product: tl.program_id(0).to(tl.int64) in Triton, (int64_t)blockIdx.x * stride in CUDA")
        out.append(Finding(CHECK, KIND, msg, Severity.WARNING, file=file, line=hit.line,
                           details={"kernel": hit.kernel, "arch": arch, "ptx": hit.excerpt}))
    return out
