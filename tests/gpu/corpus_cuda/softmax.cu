// Softmax along rows, one block per row: max, sum of exponentials, normalize. On a row that
// is -inf throughout (a fully masked attention row) the max is -inf, and the bug's
// exp(-inf - (-inf)) is NaN. The twin treats an all -inf row's max as 0 and writes zeros for
// a row whose sum is 0.
#include "common.cuh"

template <typename T, bool GUARD>
__device__ __forceinline__ void softmax(const T* __restrict__ x, T* __restrict__ y, long long stride_row,
                                        long long stride_col, int n) {
  const T* row = x + static_cast<long long>(blockIdx.x) * stride_row;
  float m = CU_NEG_INF;
  for (int c = threadIdx.x; c < n; c += blockDim.x) m = fmaxf(m, to_f32(row[c * stride_col]));
  m = block_max(m);
  if (GUARD && m == CU_NEG_INF) m = 0.0f;
  float s = 0.0f;
  for (int c = threadIdx.x; c < n; c += blockDim.x) s += expf(to_f32(row[c * stride_col]) - m);  // BUG: NaN
  s = block_sum(s);
  T* out = y + static_cast<long long>(blockIdx.x) * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const float e = expf(to_f32(row[c * stride_col]) - m);
    out[c] = from_f32<T>(GUARD && !(s > 0.0f) ? 0.0f : e / s);
  }
}

// grid (rows,); y (rows, n) contiguous; x may have any strides
#define CU_SOFTMAX(S, T)                                                                                         \
  extern "C" __global__ void softmax_unguarded_##S(const T* x, T* y, long long stride_row, long long stride_col, \
                                                   int n) {                                                      \
    softmax<T, false>(x, y, stride_row, stride_col, n);                                                          \
  }                                                                                                              \
  extern "C" __global__ void softmax_guarded_##S(const T* x, T* y, long long stride_row, long long stride_col,   \
                                                 int n) {                                                        \
    softmax<T, true>(x, y, stride_row, stride_col, n);                                                           \
  }
CU_FOR_EACH_DTYPE(CU_SOFTMAX)
