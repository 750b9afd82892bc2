"""What a head's spec may change when the base's spec cannot call the head's kernel: the call to the
kernel, read on the syntax tree. Each way to judge the kernel by something else than the base's
truth is named; plumbing alone is not. (End to end through the CLI: test_pairing.py.)"""
from __future__ import annotations

import pytest

from gpu_gate import pyscan
from gpu_gate.rules import plumbing
from gpu_gate.rules.specrules import SpecRules, specs_in_source

BASE = '''\
import torch
import gpu_gate as gg
from lib.scale import scale

BLOCK = 64


@gg.spec(dims={"n": gg.Dim(1, 300)},
         inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         params={"alpha": 2.0},
         tolerance=gg.Tolerance(baseline_factor=2.0),
         reference=lambda x, alpha: x * alpha)
def scale_gate(x, alpha):
    """Scales."""
    return scale(x, alpha)
'''
INDEX = pyscan.ModuleIndex(frozenset({"lib/__init__.py", "lib/scale.py", "gate/scale_gate.py"}))


def _spec(source: str) -> SpecRules:
    return specs_in_source(source, "gate/scale_gate.py")[0]


def _reasons(head: str) -> list[str]:
    return plumbing.differences(_spec(BASE), _spec(head), INDEX)


@pytest.mark.parametrize("head", [
    BASE.replace("return scale(x, alpha)", "return scale(x, alpha, block=64)"),
    BASE.replace("return scale(x, alpha)", "return scale(x, alpha, block=BLOCK)".replace("BLOCK", "64")),
    BASE.replace("return scale(x, alpha)", "y = scale(inp=x, factor=alpha, block=64)\n    return y"),
    BASE.replace("import scale\n", "import scale_by\n").replace("return scale(", "return scale_by("),
    BASE.replace("from lib.scale import scale", "from lib.scaling import scale"),
    BASE.replace("return scale(x, alpha)", "return scale(x, alpha, n=x.shape[0] // 2, s=x.stride(0), d=torch.float32)"),
    BASE.replace("reference=lambda x, alpha: x * alpha", "reference=lambda x, alpha: alpha * x"),  # compared at run time
], ids=["new-keyword", "constant", "bound-then-returned", "renamed-entry-point", "moved-module", "metadata",
        "reference"])
def test_plumbing_alone_is_not_a_difference(head: str) -> None:
    assert _reasons(head) == []


@pytest.mark.parametrize("head, reason", [
    (BASE.replace("    return scale(x, alpha)\n", "    out = scale(x, alpha, block=64)\n    out.copy_(x * alpha)\n"
                  "    return out\n"), "statements after the call to the kernel"),
    (BASE.replace("    return scale(x, alpha)\n", "    out = scale(x, alpha, block=64)\n    out[64:] = x[64:] * alpha\n"
                  "    return out\n"), "statements after the call to the kernel"),
    (BASE.replace("return scale(x, alpha)", "return scale(x * 0.8, alpha)"),
     "the call passes x * 0.8, which is not one of the function's arguments"),
    (BASE.replace("return scale(x, alpha)", "return torch.mul(x, alpha)"),
     "the call's callee (torch.mul) is not the base's, nor a name the spec module imports from the repository"),
    (BASE.replace("return scale(x, alpha)", "return fixed(x, alpha)") + "\n\ndef fixed(x, alpha):\n"
                                                                         "    return x * alpha\n",
     "the call's callee (fixed) is not the base's"),
    (BASE.replace("return scale(x, alpha)", "x = x.flip(0)\n    return scale(x, alpha)"),
     "the call's callee (x.flip) is not the base's"),
    (BASE.replace('"alpha": 2.0', '"alpha": 1.0'), "params= differs from the base's"),
    (BASE.replace("gg.Dim(1, 300)", "gg.Dim(1, 64)"), "dims= differs from the base's"),
    (BASE.replace('dtypes=["float32"]', 'dtypes=["float16"]'), "inputs= differs from the base's"),
    (BASE.replace("baseline_factor=2.0", "baseline_factor=8.0"), "tolerance= differs from the base's"),
    (BASE.replace("reference=", "checks=['compile'],\n         reference="), "checks= differs from the base's"),
    (BASE.replace("def scale_gate(x, alpha):", "def scale_gate(x, alpha, extra=1):"),
     "the spec function's arguments differ"),
    (BASE.replace("def scale_gate", "@torch.no_grad()\ndef scale_gate"), "other decorators differ"),
    # the head's module runs in the candidate's worker: what it runs at import could patch the kernel
    (BASE.replace("BLOCK = 64\n", "BLOCK = 64\nimport lib.scale as _m\n_m.scale = lambda x, a, block: x * a\n"),
     "the spec module's statement at line 7 (_m.scale = lambda x, a, block: x * a) is not the base's"),
    (BASE.replace("reference=lambda x, alpha: x * alpha", "reference=(setattr(torch, 'mul', None), "
                                                           "lambda x, alpha: x * alpha)[1]"),
     "the spec module's scale_gate evaluates (setattr(torch, 'mul', None), lambda x, alpha: x * alpha)[1]"),
    (BASE + "\n\n@gg.spec(dims={}, inputs={}, reference=lambda: torch.zeros(1), name=print('patched'))\n"
            "def other_gate():\n    return torch.zeros(1)\n",
     "the spec module's other_gate evaluates print('patched')"),
    (BASE.replace("def scale_gate(x, alpha):", "def scale_gate(x, alpha=torch.manual_seed(0)):"),
     "the spec function's arguments differ"),
], ids=["overwrite", "partial-write", "computed-argument", "calls-torch", "spec-own-function", "input-rewritten",
        "params", "dims", "dtypes", "tolerance", "checks", "arguments", "decorator", "module-patch",
        "reference-side-effect", "other-spec-side-effect", "default-side-effect"])
def test_anything_else_is_named(head: str, reason: str) -> None:
    reasons = _reasons(head)
    assert any(reason in r for r in reasons), reasons


def test_a_second_spec_of_the_module_with_only_its_own_call_changed_is_plumbing() -> None:
    """Two specs of one module that call the kernel, both adapted to its new keyword: for each, the
    other's definition evaluates only what the base's did."""
    two = BASE + ("\n\n@gg.spec(dims={\"n\": gg.Dim(1, 8)}, inputs={\"x\": gg.Tensor((\"n\",))},"
                  " reference=lambda x: x * 3.0)\ndef triple_gate(x):\n    return scale(x, 3.0)\n")
    head = two.replace("return scale(x, alpha)", "return scale(x, alpha, block=64)").replace(
        "return scale(x, 3.0)", "return scale(x, 3.0, block=64)")
    assert plumbing.differences(_spec(two), _spec(head), INDEX) == []


def test_a_rebound_import_is_not_an_imported_name() -> None:
    """`scale = wrapped(scale)` at module level: the callee is the spec module's own code."""
    head = BASE.replace("BLOCK = 64\n", "BLOCK = 64\nscale = torch.compile(scale)\n")
    assert "the spec module's functions or values that the spec function uses differ from the base's" in _reasons(head)


def test_versions_of_one_module_are_compared_by_name() -> None:
    head = BASE.replace("return scale(x, alpha)", "return scale(x, alpha, block=64)")
    assert plumbing.between_sources("gate/scale_gate.py", "scale_gate", BASE, head) == []
    assert plumbing.between_sources("gate/scale_gate.py", "nope", BASE, head) == [
        "the spec nope was not found in both versions of gate/scale_gate.py"]
