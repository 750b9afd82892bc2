"""Size thresholds read from a spec's candidate and the wrapper code it calls, by the syntax tree
alone: each comparison of a size-derived value with a constant, as an expression over the spec's
dims, followed through imports, helpers, autograd's ctx and module constants."""
from __future__ import annotations

import textwrap
from pathlib import Path

from gpu_gate.protocol.shapes import Threshold
from gpu_gate.shapescan import read_thresholds

SPEC = """
import gpu_gate as gg
from {module} import {name}


@gg.spec(dims={{"b": gg.Dim(1, 8), "t": gg.Dim(1, 4096), "h": gg.Dim(1, 16384)}},
         inputs={{"x": gg.Tensor(("b", "t", "h")), "w": gg.Tensor(("h",))}}, reference=None)
def the_gate(x, w):
    {body}
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _read(root: Path, spec: str = "gate.py") -> list[tuple[str, list[str]]]:
    r = read_thresholds(root, spec, "the_gate", {"x": ("b", "t", "h"), "w": ("h",)})
    return [(t.where, [" and ".join(a.text() for a in c) for c in t.any_of]) for t in r.thresholds]


def test_the_forms_of_a_threshold_in_a_wrapper(tmp_path: Path) -> None:
    _write(tmp_path, {
        "lib/__init__.py": "",
        "lib/ops.py": """
            import triton

            MANY_ROWS = 1 << 15
            MAX_FUSED = 65536


            def fused(x, w):
                shape = x.shape
                x = x.view(-1, shape[-1])
                n_rows, n_cols = x.shape
                if n_rows >= MANY_ROWS and n_cols <= 256:
                    pass
                BLOCK = triton.next_power_of_2(n_cols)
                if BLOCK > MAX_FUSED:
                    raise RuntimeError("too wide")
                M, N = n_rows, n_cols
                if M * N > 1 << 24:
                    pass
                if x.shape[0] < n_cols:
                    pass
                return x
            """,
        "gate.py": SPEC.format(module="lib.ops", name="fused", body="return fused(x, w)"),
    })
    assert _read(tmp_path) == [
        ("lib/ops.py:12", ["b * t >= 32768 and h <= 256"]),
        ("lib/ops.py:15", ["next_power_of_2(h) > 65536"]),
        ("lib/ops.py:18", ["b * t * h > 16777216"]),
        ("lib/ops.py:20", ["b * t - h < 0"]),
    ]


def test_helpers_relative_imports_constants_and_the_backward_through_ctx(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/ops/__init__.py": "",
        "pkg/ops/utils.py": """
            import triton

            def calculate_settings(n):
                BLOCK_SIZE = triton.next_power_of_2(n)
                num_warps = 4
                if BLOCK_SIZE >= 32768:
                    num_warps = 32
                elif BLOCK_SIZE >= 2048:
                    num_warps = 8
                return BLOCK_SIZE, num_warps
            """,
        "pkg/ops/norm.py": """
            import torch
            from .utils import calculate_settings
            from ..limits import SPLIT

            class Norm(torch.autograd.Function):
                @staticmethod
                def forward(ctx, X, W):
                    X = X.reshape(-1, X.shape[-1])
                    BLOCK, warps = calculate_settings(X.shape[1])
                    ctx.save_for_backward(X, W)
                    ctx.BLOCK = BLOCK
                    return X

                @staticmethod
                def backward(ctx, dY):
                    X, W = ctx.saved_tensors
                    rows = X.shape[0]
                    if ctx.BLOCK > 8192 or rows > SPLIT:
                        pass
                    if dY.shape[0] != rows:  # always equal: no threshold
                        pass
                    if dY.shape[1] > 4096:
                        pass
                    return dY, None
            """,
        "pkg/limits.py": "SPLIT = 4 * 1024\n",
        "gate.py": SPEC.format(module="pkg.ops.norm", name="Norm", body="return Norm.apply(x, w)"),
    })
    found = dict(_read(tmp_path))
    assert found["pkg/ops/utils.py:7"] == ["next_power_of_2(h) >= 32768"]
    assert found["pkg/ops/utils.py:9"] == ["next_power_of_2(h) >= 2048"]
    assert found["pkg/ops/norm.py:19"] == ["next_power_of_2(h) > 8192", "b * t > 4096"], "an or: two conjunctions"
    assert found["pkg/ops/norm.py:23"] == ["h > 4096"], "the gradient is shaped as the forward's output"
    assert len(found) == 4


def test_a_module_s_forward_a_condition_kept_in_a_variable_and_a_negation(tmp_path: Path) -> None:
    _write(tmp_path, {
        "lib.py": """
            import torch

            def use_split(n):
                return n >= 4096

            class Layer(torch.nn.Module):
                def forward(self, x):
                    split = use_split(x.shape[1])
                    if split:
                        pass
                    if not (x.shape[-1] % 128 == 0 and x.size(0) > 2):
                        pass
                    return x
            """,
        "gate.py": SPEC.format(module="lib", name="Layer", body="return Layer()(x)"),
    })
    assert _read(tmp_path) == [("lib.py:5", ["t >= 4096"]), ("lib.py:12", ["h % 128 != 0", "b <= 2"])]


def test_nothing_is_imported_and_code_outside_the_repository_is_not_followed(tmp_path: Path) -> None:
    _write(tmp_path, {
        "lib.py": """
            raise SystemExit("imported!")
            import torch

            def f(x):
                y = torch.nn.functional.layer_norm(x, x.shape[-1:])  # not the repository's: not followed
                if y.shape[0] > 3:  # the shape of an unknown call's result: unknown
                    pass
                if x.dtype == torch.bfloat16 and x.shape[1] > 100:  # the dtype part cannot be read
                    pass
                return y
            """,
        "gate.py": SPEC.format(module="lib", name="f", body="return f(x)"),
    })
    assert _read(tmp_path) == [("lib.py:9", ["t > 100"])]


def test_a_recursive_or_unreadable_wrapper_reads_what_it_can(tmp_path: Path) -> None:
    _write(tmp_path, {
        "lib.py": """
            def f(x, n=0):
                if x.shape[0] > 2:
                    return f(x, n + 1)
                return x
            """,
        "broken.py": "def f(x:\n",
        "gate.py": SPEC.format(module="lib", name="f", body="from broken import g\n    g(x)\n    return f(x)"),
    })
    assert _read(tmp_path) == [("lib.py:3", ["b > 2"])]
    r = read_thresholds(tmp_path, "missing.py", "the_gate", {})
    assert r.thresholds == [] and r.why and "missing.py" in r.why


def test_a_threshold_crosses_as_json() -> None:
    t = read_thresholds.__module__  # (the reader's records are the protocol's)
    assert t == "gpu_gate.shapescan"
    from gpu_gate.protocol.shapes import Atom

    th = Threshold("a.py:3", "n > 8", ((Atom(("call", "next_power_of_2", ("dim", "n")), ">", 8.0),),))
    assert Threshold.from_json(th.to_json()) == th
    assert th.any_of[0][0].holds({"n": 9}) and not th.any_of[0][0].holds({"n": 8})
    assert th.any_of[0][0].holds({}) is None
