"""The files ``gpu-gate init`` writes (``str.format`` templates: literal braces are doubled)."""
from __future__ import annotations

POLICY = """\
# gpu-gate policy, written by `gpu-gate init`. Keys left out keep the defaults of gpu-gate's
# default preset (every key is listed and explained in gpu_gate/policy/presets/default.yml).
# Check it with: gpu-gate validate-policy --strict
version: 1

# Which files are kernels: .cu/.cuh files, and .py files that define a GPU kernel (found by
# parsing them: Triton, CuTe DSL, cuTile, TileLang, Numba CUDA, Warp, Helion, CuPy JIT).
kernels:
  include: ["**/*.cu", "**/*.cuh", "**/*.py"]
  exclude: {excludes}{excludes_note}

# Where the gate specs live: Python files that say how to call a kernel and what it must equal.
specs: ["{specs_glob}"]

# A changed kernel that no gate spec covers: fail (blocks the merge) | warn | ignore.
uncovered: fail

# A required check that could not run (no GPU, no compute-sanitizer, a spec that does not import):
# fail (blocks the merge) | warn. Without a GPU, the GPU-only checks cannot run: keep `fail` on the
# GPU runners that gate merges.
not_run: fail

# The checks: required (a failure blocks), advisory (reported only) or off.
checks:
  equivalence: {{cases: 64}}   # fuzzed inputs against a float64 reference, on the CPU too
  compile: required           # nvcc / Triton compile for the target architectures, no GPU needed
  determinism: required       # repeated runs, alone and under load (GPU)
  memcheck: required          # compute-sanitizer tools (GPU)
  racecheck: required
  synccheck: required
  initcheck: advisory
"""

_HEADER = '''\
"""Gate spec for the {language} kernel `{kernel}` ({path}:{line}), written by `gpu-gate init`.

Fill in every TODO(gpu-gate) below: the dimensions, the inputs, the reference and the call.
Until then this spec fails on purpose, so that no check passes without a reference.
How to write a spec: docs/specs.md of gpu-gate. Try it with:
    gpu-gate check --base main --spec {spec}
"""
'''

_SPEC = '''

def reference(x):
    # TODO(gpu-gate): what `{kernel}` must compute, in plain torch. The gate runs it in float64 on
    # the same inputs and compares the kernel's output with it.
    raise NotImplementedError("TODO(gpu-gate): write the reference for {kernel} in {spec}")


@gg.spec(
    # TODO(gpu-gate): the kernel's dimensions and their ranges (gg.Dim(lo, hi, reduction=...)).
    dims={{"n": gg.Dim(1, 4096)}},
    # TODO(gpu-gate): the inputs, shaped by the dimension names, with the dtypes the kernel supports.
    inputs={{"x": gg.Tensor(("n",), dtypes=["float32", "float16", "bfloat16"])}},
    reference=reference,
    covers=["{path}"],
)
def {func}(x):
{call}
'''

PYTHON_SPEC = _HEADER + '''import sys

import torch  # noqa: F401  (the reference and the call use it)

import gpu_gate as gg
import {module}  # noqa: F401  (defines {kernel}; the gate follows this import to the kernel)

# The module itself: `import {module} as kernels` would give a function instead where a package
# re-exports one of the same name (`from .scale import scale`).
kernels = sys.modules["{module}"]
''' + _SPEC.replace("{call}", '''\
    # TODO(gpu-gate): call the Python function that launches `{kernel}` (its wrapper, which allocates
    # the output and computes the grid), e.g. `return kernels.my_op(x)`.
    raise NotImplementedError("TODO(gpu-gate): call {kernel} through its wrapper in {path}")''')

CUDA_SPEC = _HEADER + '''import torch  # noqa: F401  (the reference and the call use it)

import gpu_gate as gg
''' + _SPEC.replace("{call}", '''\
    # TODO(gpu-gate): launch `{kernel}`, e.g.
    #   kernel = gg.cuda.load("{path}", "{kernel}")
    #   y = gg.empty_like(x)
    #   kernel(((x.numel() + 255) // 256,), (256,), x, y, gg.cuda.int32(x.numel()))
    #   return y
    raise NotImplementedError("TODO(gpu-gate): launch {kernel} from {path}")''')
