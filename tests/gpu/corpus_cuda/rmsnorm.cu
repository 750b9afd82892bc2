// RMSNorm, one block per row; the rows have unit column stride (the caller makes them so).
// The bug assumes packed rows: row r starts at r * n instead of r * stride_row, which reads
// the wrong elements whenever the rows are further apart than their length (a column slice of
// a wider tensor). The twin uses the row stride it is given.
#include "common.cuh"

template <typename T, bool USE_STRIDE>
__device__ __forceinline__ void rmsnorm(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                        long long stride_row, long long w_stride, int n, float eps) {
  const long long r = blockIdx.x;
  const T* row = x + (USE_STRIDE ? r * stride_row : r * n);  // BUG without the stride: packed rows
  float q = 0.0f;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = to_f32(row[c]);
    q += v * v;
  }
  const float rms_inv = 1.0f / sqrtf(block_sum(q) / n + eps);
  T* out = y + r * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    out[c] = from_f32<T>(to_f32(row[c]) * rms_inv * to_f32(w[c * w_stride]));
  }
}

// grid (rows,); y (rows, n) contiguous; x has unit column stride; w may have any stride
#define CU_RMSNORM(S, T)                                                                                  \
  extern "C" __global__ void rmsnorm_packed_rows_##S(const T* x, const T* w, T* y, long long stride_row, \
                                                     long long w_stride, int n, float eps) {             \
    rmsnorm<T, false>(x, w, y, stride_row, w_stride, n, eps);                                             \
  }                                                                                                       \
  extern "C" __global__ void rmsnorm_row_stride_##S(const T* x, const T* w, T* y, long long stride_row,  \
                                                    long long w_stride, int n, float eps) {              \
    rmsnorm<T, true>(x, w, y, stride_row, w_stride, n, eps);                                              \
  }
CU_FOR_EACH_DTYPE(CU_RMSNORM)
