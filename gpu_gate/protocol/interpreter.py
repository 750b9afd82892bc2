"""The names of the Triton interpreter's adaptations (see :mod:`gpu_gate.worker.interpreter`), as a
worker reports the ones its launches needed, and what each means in the note the judge writes."""
from __future__ import annotations

ADAPTATIONS = {
    "float-arguments": "float arguments reached the kernels as float32 scalars, as a compiled kernel takes them "
                       "(the interpreter passes a Python float, which has no .to() and promotes like a literal)",
    "bfloat16": "bfloat16 arithmetic ran in float32, each result rounded to bfloat16 (to nearest even) as the GPU "
                "rounds it (the interpreter computes on the raw bits)",
    "half-precision-sums": "float16/bfloat16 sums were added pairwise with every partial sum rounded to the data's "
                           "dtype, as a GPU's reduction does (numpy would accumulate float16 in float32)",
    "libdevice": "libdevice functions were computed in float64 and rounded once to their dtype (the interpreter "
                 "has none)",
}
