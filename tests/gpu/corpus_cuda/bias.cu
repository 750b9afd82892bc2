// y = 0.5 * x + b over (rows, n), a 2-D grid of 128-column tiles by rows. The bug launches
// n / 128 tiles (rounded down) and has no bounds check, so the last n % 128 columns of every
// row are never written (and a row shorter than a tile gets no block at all). The twin rounds
// the tile count up and masks the tail.
#include "common.cuh"

#define CU_BIAS_TILE 128

template <typename T, bool MASK_TAIL>
__device__ __forceinline__ void bias(const T* __restrict__ x, const T* __restrict__ b, T* __restrict__ y,
                                     long long stride_row, long long stride_col, long long b_stride, long long n) {
  const long long r = blockIdx.y;
  const long long c = static_cast<long long>(blockIdx.x) * CU_BIAS_TILE + threadIdx.x;
  if (MASK_TAIL && c >= n) return;  // BUG without it (and with the tile count rounded down): no tail
  const float v = to_f32(x[r * stride_row + c * stride_col]) * 0.5f + to_f32(b[c * b_stride]);
  y[r * n + c] = from_f32<T>(v);
}

// grid (tiles, rows), block (128,); y (rows, n) contiguous; x and b may have any strides
#define CU_BIAS(S, T)                                                                                           \
  extern "C" __global__ void bias_no_tail_##S(const T* x, const T* b, T* y, long long stride_row,               \
                                              long long stride_col, long long b_stride, long long n) {         \
    bias<T, false>(x, b, y, stride_row, stride_col, b_stride, n);                                               \
  }                                                                                                             \
  extern "C" __global__ void bias_masked_tail_##S(const T* x, const T* b, T* y, long long stride_row,           \
                                                  long long stride_col, long long b_stride, long long n) {     \
    bias<T, true>(x, b, y, stride_row, stride_col, b_stride, n);                                                \
  }
CU_FOR_EACH_DTYPE(CU_BIAS)
