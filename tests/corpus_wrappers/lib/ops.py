"""Host wrappers around lib/kernels.py: the correct ones, and one planted bug each, of the
kinds that real libraries have shipped (a stride assumed, a .contiguous() dropped, a grid
rounded down, an output allocated with the input's strides)."""
import torch
import triton

from .kernels import rmsnorm_packed, rmsnorm_strided

EPS = 1e-6
ROWS = 4


def _launch_strided(x2, w, y, col_stride):
    n_rows, n_cols = x2.shape
    grid = (triton.cdiv(n_rows, ROWS),)
    rmsnorm_strided[grid](x2, w, y, x2.stride(0), col_stride, y.stride(0), n_rows, n_cols, EPS,
                          ROWS=ROWS, BLOCK=triton.next_power_of_2(n_cols))


def rmsnorm(x, w):
    """Correct: any layout, rows tiled ROWS at a time."""
    x2, w = x.reshape(-1, x.shape[-1]), w.contiguous()
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    _launch_strided(x2, w, y, x2.stride(1))
    return y.reshape(x.shape)


def rmsnorm_unit_col_stride(x, w):
    """Bug: passes 1 as the column stride, as if the last dim were always contiguous."""
    x2, w = x.reshape(-1, x.shape[-1]), w.contiguous()
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    _launch_strided(x2, w, y, 1)
    return y.reshape(x.shape)


def rmsnorm_floor_grid(x, w):
    """Bug: the grid is rounded down, so the last n_rows % ROWS rows are never written."""
    x2, w = x.reshape(-1, x.shape[-1]), w.contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    rmsnorm_strided[(max(1, n_rows // ROWS),)](x2, w, y, x2.stride(0), x2.stride(1), y.stride(0), n_rows, n_cols,
                                               EPS, ROWS=ROWS, BLOCK=triton.next_power_of_2(n_cols))
    return y.reshape(x.shape)


def rmsnorm_rows(x, w):
    """Correct: the packed kernel, after making the rows packed."""
    x2, w = x.reshape(-1, x.shape[-1]).contiguous(), w.contiguous()
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    rmsnorm_packed[(x2.shape[0],)](x2, w, y, x2.stride(0), y.stride(0), x2.shape[1], EPS, BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.reshape(x.shape)


def rmsnorm_rows_no_contiguous(x, w):
    """Bug: the .contiguous() is dropped; a transposed input reaches the packed kernel."""
    x2, w = x.reshape(-1, x.shape[-1]), w.contiguous()
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    rmsnorm_packed[(x2.shape[0],)](x2, w, y, x2.stride(0), y.stride(0), x2.shape[1], EPS, BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.reshape(x.shape)


def rmsnorm_empty_like(x, w):
    """Bug: the output takes the input's strides (empty_like), but the kernel writes packed rows."""
    x2, w = x.reshape(-1, x.shape[-1]), w.contiguous()
    y = torch.empty_like(x2)
    _launch_strided(x2, w, y, x2.stride(1))
    return y.reshape(x.shape)
