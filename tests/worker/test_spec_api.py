"""The gate-spec API: declarations are validated when the spec module is imported, with
messages that name the spec and say what to change."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import gpu_gate as gg
from gpu_gate.errors import SpecError
from gpu_gate.spec import specs_in_module, upcast


def _ok(x, w):  # noqa: ANN001, ANN202 - a candidate as users write it
    return x * w


def test_a_spec_records_its_declarations() -> None:
    s = gg.spec(dims={"n": gg.Dim(1, 64, reduction=True)},
                inputs={"x": gg.Tensor(("n",), dtypes=["float32", "bfloat16"]), "w": gg.Tensor(("n",), dtype="like:x")},
                reference=lambda x, w: x * w, deterministic=True, tolerance=gg.Tolerance(baseline_factor=3))(_ok)
    assert s.name == "_ok" and s.dims["n"].reduction and s.deterministic
    assert s.dtype_choices() == ("float32", "bfloat16")
    assert s.tolerance.baseline_factor == 3
    assert s.line > 0 and s.file.endswith("test_spec_api.py")
    assert s(torch.ones(2), torch.full((2,), 3.0)).tolist() == [3.0, 3.0]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: gg.Dim(5, 2), "Dim(5, 2): need 0 <= lo <= hi"),
    (lambda: gg.Dim(1, 8, multiple_of=0), "Dim(multiple_of=0): must be >= 1"),
    (lambda: gg.Tensor(("n",), dtypes=["float32"], dtype="float16"), "Tensor: give dtypes=[...] or dtype=..., not both"),
    (lambda: gg.Tensor(("n",), dtypes=["float128"]), "Tensor: unknown dtype 'float128'"),
    (lambda: gg.Tensor(("n",), dists=["gaussian"]), "Tensor: unknown dists ['gaussian']"),
    (lambda: gg.Tensor(("n",), layouts=["diagonal"]), "Tensor: unknown layouts ['diagonal']"),
    (lambda: gg.Index(("n",), high="v", dtype="float32"), "Index: unknown dtype 'float32'"),
    (lambda: gg.Index(("n",), high="v", dists=["normal"]), "Index: unknown dists ['normal']"),
    (lambda: gg.Index(("n",), high="v", layouts=["transposed"]), "Index: unknown layouts ['transposed']"),
    (lambda: gg.Tolerance(atol=1e-3), "Tolerance: give atol and rtol together, or neither"),
    (lambda: gg.Tolerance(rtol=1e-3), "Tolerance: give atol and rtol together, or neither"),
    (lambda: gg.Tolerance(baseline_factor=-1), "Tolerance: baseline_factor=-1 must be a number >= 0"),
    (lambda: gg.Tolerance(baseline_factor=0), "Tolerance: baseline_factor must be > 0"),
])
def test_declarations_are_validated(make: object, message: str) -> None:
    with pytest.raises(SpecError) as e:
        make()  # type: ignore[operator]
    assert message in str(e.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"inputs": {"x": gg.Tensor(("m",)), "w": gg.Tensor(("n",))}},
     "spec '_ok': input 'x' uses dim 'm', which is not in dims=['n']"),
    ({"inputs": {"x": gg.Tensor(("n",)), "w": gg.Tensor(("n",), dtype="like:y")}},
     "spec '_ok': input 'w' has dtype='like:y' but 'y' is not a float input"),
    ({"grads": ["i"], "inputs": {"x": gg.Tensor(("n",)), "w": gg.Tensor(("n",)), "i": gg.Index(("n",), high="n")}},
     "spec '_ok': grads names 'i', which is not a float input"),
    ({"inputs": {"x": gg.Tensor(("n",)), "w": gg.Tensor(("n",)), "z": gg.Tensor(("n",))}},
     "spec '_ok': the function does not take input(s) ['z'] as parameters"),
    ({"dim_args": ["k"]}, "spec '_ok': dim_args names 'k', which is not in dims=['n']"),
    ({"inputs": {"x": gg.Tensor(("n",)), "w": gg.Index(("n",), high="v")}},
     "spec '_ok': index 'w' has high='v', which is not in dims"),
    ({"producer": ["y"]}, "spec '_ok': producer names 'y', which is not an input (inputs: ['w', 'x'])"),
    ({"producer": [1]}, "spec '_ok': producer= names the inputs a kernel writes just before the call, "
                        "e.g. producer=['x'], not [1]"),
])
def test_spec_errors_name_the_spec_and_the_fix(kwargs: dict, message: str) -> None:
    decl = {"dims": {"n": gg.Dim(1, 8)}, "inputs": {"x": gg.Tensor(("n",)), "w": gg.Tensor(("n",))},
            "reference": lambda x, w: x, **kwargs}
    with pytest.raises(SpecError) as e:
        gg.spec(**decl)(_ok)
    assert str(e.value) == message


def test_a_producer_is_a_list_of_inputs_and_reaches_the_judge() -> None:
    """``producer="x"`` and ``producer=["x"]`` say the same; the judge's copy of the spec (built
    from the reference worker's description, no functions) keeps it."""
    from gpu_gate.judge.workers import spec_from_description
    from gpu_gate.worker.reference import describe

    decl = {"dims": {"n": gg.Dim(1, 8)}, "inputs": {"x": gg.Tensor(("n",)), "w": gg.Tensor(("n",))},
            "reference": lambda x, w: x * w}
    one = gg.spec(**decl, producer="x")(_ok)
    assert one.producer == ("x",) and gg.spec(**decl, producer=["x", "x"])(_ok).producer == ("x",)
    assert spec_from_description(describe(one)).producer == ("x",)
    assert gg.spec(**decl)(_ok).producer == ()


def test_dim_args_must_be_parameters_of_the_candidate() -> None:
    with pytest.raises(SpecError, match=r"does not take input\(s\) \['n'\]"):
        gg.spec(dims={"n": gg.Dim(1, 8)}, inputs={"x": gg.Tensor(("n",)), "w": gg.Tensor(("n",))},
                reference=lambda x, w, n: x, dim_args=["n"])(_ok)


def test_importing_a_spec_module_again_replaces_its_specs(tmp_path: Path) -> None:
    mod = tmp_path / "gate_reimport.py"

    def load(value: int) -> list:
        mod.write_text("import gpu_gate as gg\n"
                       "@gg.spec(dims={'n': gg.Dim(1, 4)}, inputs={'x': gg.Tensor(('n',))}, reference=lambda x: x)\n"
                       f"def g(x):\n    return x + {value}\n")
        spec = importlib.util.spec_from_file_location("gate_reimport_mod", mod)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["gate_reimport_mod"] = module
        spec.loader.exec_module(module)
        return specs_in_module("gate_reimport_mod")

    load(1)
    found = load(2)
    assert len(found) == 1 and found[0](torch.zeros(1)).item() == 2.0


def test_upcast_keeps_float64_and_raises_low_precision_to_float32() -> None:
    assert upcast(torch.ones(2, dtype=torch.bfloat16)).dtype == torch.float32
    assert upcast(torch.ones(2, dtype=torch.float64)).dtype == torch.float64
    assert upcast(torch.ones(2, dtype=torch.int64)).dtype == torch.int64


def test_gg_empty_is_a_plain_tensor_outside_the_harness_and_nan_filled_inside() -> None:
    from gpu_gate.worker.watch import OutputWatch

    plain = gg.empty(3, 4, dtype=torch.float32)
    assert plain.shape == (3, 4)
    with OutputWatch() as watch:
        out = gg.empty_like(torch.zeros(5, dtype=torch.float16))
    assert out.dtype == torch.float16 and torch.isnan(out).all()
    assert len(watch.outputs) == 1 and watch.outputs[0].guards_intact()
