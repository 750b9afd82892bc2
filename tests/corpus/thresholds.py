"""A backward whose dW takes another code path past a size threshold on two dims at once (many
rows and a handful of channels, tests/corpus/wraplib/scale.py): the bug keeps that path's running
total in bf16. Drawn one dim at a time, the fuzzing never combines 100000 rows with 4 channels;
the wrapper's source says where the path is, and the schedule runs both sides of it. The twin
keeps the running total in fp32."""
import torch

import gpu_gate as gg
from wraplib.scale import scale

DECL = dict(
    dims={"rows": gg.Dim(1, 1 << 17), "hidden": gg.Dim(1, 1024)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32"]), "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=lambda x, w: x * w,
    grads=["x", "w"],
)


@gg.spec(name="dweight_split_path_bf16", **DECL)
def split_bug(x, w):
    return scale(x, w, split_acc=torch.bfloat16)


@gg.spec(name="dweight_split_path_fp32", **DECL)
def split_twin(x, w):
    return scale(x, w, split_acc=torch.float32)
