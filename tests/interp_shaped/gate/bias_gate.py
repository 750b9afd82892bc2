"""A bias add in a bfloat16 model, forward and backward: the bias gradient is summed with bfloat16
atomics, on purpose (``accumulate``)."""
import gpu_gate as gg
from normkit.bias import AddBias


@gg.spec(
    dims={"rows": gg.Dim(1, 64), "hidden": gg.Dim(1, 512)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["bfloat16"]), "b": gg.Tensor(("hidden",), dtype="like:x")},
    reference=lambda x, b: x + b,
    grads=["x", "b"],
    accumulate="bfloat16",
)
def bias_gate(x, b):
    return AddBias.apply(x, b)
