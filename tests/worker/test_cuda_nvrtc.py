from __future__ import annotations

import shutil
from pathlib import Path

import pytest

cupy = pytest.importorskip("cupy")

from gpu_gate import cuda  # noqa: E402
from gpu_gate.worker import nvrtc  # noqa: E402

DATA = Path(__file__).parent.parent / "data" / "cuda"


def _nvrtc_available() -> bool:
    try:
        cupy.cuda.nvrtc.getVersion()
    except Exception:  # noqa: BLE001 - the NVRTC library is not installed
        return False
    return True


needs_nvrtc = pytest.mark.skipif(not _nvrtc_available(), reason="the NVRTC library is not installed")


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(DATA, root / "csrc")
    monkeypatch.setenv("GPU_GATE_REPO_ROOT", str(root))
    return root


@needs_nvrtc
def test_compile_ptx_without_a_gpu_resolves_repo_relative_paths(repo: Path) -> None:
    ptx = cuda.compile_ptx("csrc/good.cu", 90)
    assert ".entry add_one" in ptx
    assert ".target sm_90" in ptx
    # -lineinfo: the PTX names the repo-relative file, so tools can point at it
    assert 'csrc/good.cu"' in ptx


@needs_nvrtc
def test_nvrtc_error_carries_file_and_line(repo: Path) -> None:
    with pytest.raises(cuda.NvrtcCompileError) as info:
        cuda.compile_ptx("csrc/broken.cu", "sm_90")
    [diag] = [d for d in info.value.diagnostics if d.severity == "error"]
    assert (diag.file, diag.line) == ("csrc/broken.cu", 2)
    assert str(info.value).startswith('NVRTC could not compile csrc/broken.cu:2: identifier "undefined_thing"')


@needs_nvrtc
def test_cubin_lowered_name_of_a_template_instance(repo: Path) -> None:
    cubin, lowered = nvrtc.compile_cubin("csrc/good.cu", 90, name_expressions=["scale_tail<2>"])
    assert lowered == {"scale_tail<2>": "_Z10scale_tailILi2EEvPfi"}
    assert cubin[:4] == b"\x7fELF"


def test_python_scalars_are_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"argument 1 is a Python int.*gg\.cuda\.int32"):
        nvrtc._kernel_arg(1, 7)
    assert nvrtc._kernel_arg(0, cuda.int32(7)).dtype == cuda.int32(0).dtype


def test_package_import_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, gpu_gate.cuda; print('cupy' in sys.modules, 'torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False"


def test_disable_pools_turns_cupys_pools_off() -> None:
    before = cupy.cuda.get_allocator()
    try:
        # a pool first, whatever an earlier test in this process left set
        cupy.cuda.set_allocator(cupy.cuda.MemoryPool().malloc)
        assert isinstance(getattr(cupy.cuda.get_allocator(), "__self__", None), cupy.cuda.MemoryPool)
        cuda.disable_pools()
        allocator = cupy.cuda.get_allocator()
        assert not isinstance(getattr(allocator, "__self__", None), cupy.cuda.MemoryPool)
    finally:
        cupy.cuda.set_allocator(before)
