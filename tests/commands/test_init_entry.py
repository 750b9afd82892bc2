"""`gpu-gate init` writes a spec from the kernel file's entry point, read from its syntax tree: an
autograd Function (called through ``.apply``), an nn.Module or a plain function; its tensors become the
inputs, the rest constants at their defaults, and a backward makes ``grads=``. Without ``--kernel`` it
lists the candidates with the entry point that reaches each kernel and the line that launches it."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gpu_gate.commands import init_entry, init_spec
from gpu_gate.commands.init_entry import Param

FIXTURE = Path(__file__).resolve().parents[1] / "interp_shaped"

OPS = '''
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _fwd(X, Y, n, eps, BLOCK: tl.constexpr):
    pass


@triton.jit
def _bwd(DY, DX, n, BLOCK: tl.constexpr):
    pass


def norm_forward(x, eps):
    y = torch.empty_like(x)
    _fwd[(x.shape[0],)](x, y, x.shape[1], eps, BLOCK=128)
    return y


def norm_backward(dy):
    dx = torch.empty_like(dy)
    _bwd[(dy.shape[0],)](dy, dx, dy.shape[1], BLOCK=128)
    return dx


class NormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, W, eps, mode="fast", *, in_place=False):
        return norm_forward(X, eps)

    @staticmethod
    def backward(ctx, dY):
        return norm_backward(dY), None, None, None


class Norm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states):
        return NormFunction.apply(hidden_states, self.weight, self.eps)


def norm(x, eps=1e-5):
    return norm_forward(x, eps)
'''


def _read(source: str) -> init_entry.FileEntries:
    return init_entry.read(ast.parse(source), {"_fwd", "_bwd"})


def test_every_launch_with_the_function_that_launches_it() -> None:
    found = _read(OPS)
    assert [(x.kernel, x.host) for x in found.launches] == [("_fwd", "norm_forward"), ("_bwd", "norm_backward")]


def test_the_autograd_function_first_then_the_module_then_the_function() -> None:
    entries = _read(OPS).entries
    assert [(e.kind, e.call) for e in entries] == [("autograd", "NormFunction.apply"), ("module", "Norm"),
                                                   ("function", "norm"), ("function", "norm_forward"),
                                                   ("function", "norm_backward")]
    fn, module = entries[0], entries[1]
    assert [p.name for p in fn.params] == ["X", "W", "eps", "mode", "in_place"] and fn.backward
    assert {x.kernel for x in fn.launches} == {"_fwd", "_bwd"}  # forward's and backward's
    assert module.parameters == ("weight",) and [p.name for p in module.init_params] == ["hidden_size", "eps"]
    assert module.backward  # its forward goes through NormFunction.apply, which has a backward


def test_arguments_are_read_as_tensors_or_constants() -> None:
    args = init_spec.classify((Param("X", None, None), Param("W", None, None), Param("eps", None, None),
                               Param("mode", "'fast'", None), Param("weight_opt", None, "Optional[torch.Tensor]"),
                               Param("target", None, None), Param("n", None, "int")))
    assert [(a.param.name, a.role, a.value) for a in args] == [
        ("X", "data", ""), ("W", "vector", ""), ("eps", "constant", "1e-6"), ("mode", "constant", "'fast'"),
        ("weight_opt", "constant", "None"), ("target", "index", ""), ("n", "constant", "None")]
    # swiglu's (a, b): two operands of one shape; beside a weight, b is the bias
    assert [a.role for a in init_spec.classify((Param("a", None, None), Param("b", None, None)))] == ["data", "data"]
    assert [a.role for a in init_spec.classify((Param("x", None, None), Param("w", None, None),
                                                Param("b", None, None)))] == ["data", "vector", "vector"]


def test_the_skeleton_for_a_function_calls_apply_with_every_argument_and_checks_gradients() -> None:
    entry = _read(OPS).entries[0]
    text = init_spec.render(entry, "lib.ops", "src/lib/ops.py", "gate/ops_gate.py", True, "ops_gate").text
    compile(text, "ops_gate.py", "exec")
    assert "from lib.ops import NormFunction\n" in text
    assert "EPS = 1e-6\nMODE = 'fast'\nIN_PLACE = False\n" in text
    assert "def reference(X, W):" in text and "def ops_gate(X, W):" in text
    assert "    return NormFunction.apply(X, W, EPS, MODE, in_place=IN_PLACE)\n" in text
    assert 'inputs={"X": gg.Tensor(("rows", "cols"), dtypes=["float32", "float16", "bfloat16"]),\n' \
           '            "W": gg.Tensor(("cols",), dtype="like:X")},' in text
    assert 'grads=["X", "W"],' in text and '"cols": gg.Dim(1, 8192, reduction=True)' in text
    assert "(no default for eps: guessed)" in text


def test_the_skeleton_for_a_module_calls_its_forward_with_its_parameters_as_inputs() -> None:
    entry = _read(OPS).entries[1]
    text = init_spec.render(entry, "lib.ops", "src/lib/ops.py", "gate/ops_gate.py", False, "ops_gate").text
    compile(text, "ops_gate.py", "exec")
    assert "def ops_gate(hidden_states, weight):" in text
    assert "    module = Norm(hidden_states.shape[-1]).to(hidden_states.device)\n" in text
    assert '    return torch.func.functional_call(module, {"weight": weight}, (hidden_states,))\n' in text
    assert 'grads=["hidden_states", "weight"],' in text


# --- end to end, on a repository ---------------------------------------------------------------

def gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_EVENT_PATH")}
    return subprocess.run([sys.executable, "-m", "gpu_gate", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=900)


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "normkit"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns("gate", "__pycache__"))
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "normkit"]):
        subprocess.run(["git", *cmd], cwd=root, check=True)
    return root


def test_init_lists_each_kernel_files_entry_point_and_launch_sites(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    p = gate("init", cwd=root)
    assert p.returncode == 0, p.stderr
    assert "4 kernel files found, 4 not covered by a spec; the entry points that reach their kernels" in p.stdout
    assert ("  src/normkit/rms_norm.py: RMSNormFunction.apply (line 65) launches _rms_norm_fwd at line 50, in "
            "rms_norm_forward (+1 more); also RMSNorm, rms_norm_forward\n") in p.stdout, p.stdout
    assert "  src/normkit/softmax.py: scaled_softmax (line 21) launches _scaled_softmax_fwd at line 26, in " \
           "scaled_softmax\n" in p.stdout, p.stdout


def test_init_with_a_kernel_writes_a_spec_that_passes_once_its_reference_is_written(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    p = gate("init", "--kernel", "src/normkit/rms_norm.py", cwd=root)
    assert p.returncode == 0, p.stderr
    assert ("wrote gate/rms_norm_gate.py: a spec skeleton for RMSNormFunction.apply (src/normkit/rms_norm.py:65), "
            "which launches _rms_norm_bwd, _rms_norm_fwd (other entry points there: RMSNorm") in p.stdout, p.stdout
    spec = root / "gate" / "rms_norm_gate.py"
    text = spec.read_text()
    assert "    return RMSNormFunction.apply(X, W, EPS, OFFSET, IN_PLACE)\n" in text
    todo = 'raise NotImplementedError("TODO(gpu-gate): write the reference for RMSNormFunction in gate/rms_norm_gate.py")'
    assert todo in text
    # what a user fills in: the reference, and sizes the interpreter runs quickly
    text = text.replace(todo, "h = X.float() if X.dtype != torch.float64 else X\n"
                              "    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * W).to(X.dtype)")
    text = text.replace('gg.Dim(1, 4096)', 'gg.Dim(1, 32)').replace('gg.Dim(1, 8192, reduction=True)',
                                                                     'gg.Dim(1, 512, reduction=True)')
    text = text.replace('dtypes=["float32", "float16", "bfloat16"]', 'dtypes=["float32"]')
    spec.write_text(text)
    check = gate("check", "--cpu", "--all", "--no-cache", "--spec", "gate/rms_norm_gate.py", cwd=root)
    assert "PASS    equivalence gate/rms_norm_gate.py::rms_norm_gate" in check.stdout, check.stdout + check.stderr
