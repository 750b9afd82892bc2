// A layer norm (no affine) over a row that the kernel walks as a power-of-two tile of
// `padded` lanes, one block per row. Lanes past the row's end load 0. The bug forgets that
// when it sums the squared deviations: every padding lane adds (0 - mean)^2 to the variance.
// The twin masks the padding lanes out.
#include "common.cuh"

template <typename T, bool MASK_PADDING>
__device__ __forceinline__ void layernorm(const T* __restrict__ x, T* __restrict__ y, long long stride_row,
                                          long long stride_col, int n, int padded, float eps) {
  const T* row = x + static_cast<long long>(blockIdx.x) * stride_row;
  // The mean of the deviations from the row's first element: exact differences for low
  // precision inputs, and no cancellation when every value carries a large common offset.
  const float shift = to_f32(row[0]);
  float s = 0.0f;
  for (int c = threadIdx.x; c < n; c += blockDim.x) s += to_f32(row[c * stride_col]) - shift;
  const float mean = shift + block_sum(s) / n;
  float q = 0.0f;
  for (int c = threadIdx.x; c < padded; c += blockDim.x) {
    const float v = c < n ? to_f32(row[c * stride_col]) : 0.0f;
    float d = v - mean;
    if (MASK_PADDING && c >= n) d = 0.0f;
    q += d * d;  // BUG without the mask: each padding lane adds mean^2
  }
  const float var = block_sum(q) / n;
  const float rstd = 1.0f / sqrtf(var + eps);
  T* out = y + static_cast<long long>(blockIdx.x) * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) out[c] = from_f32<T>((to_f32(row[c * stride_col]) - mean) * rstd);
}

// grid (rows,); y (rows, n) contiguous; padded: the next power of two >= n
#define CU_LAYERNORM(S, T)                                                                                    \
  extern "C" __global__ void layernorm_padded_var_##S(const T* x, T* y, long long stride_row, long long stride_col, \
                                                      int n, int padded, float eps) {                         \
    layernorm<T, false>(x, y, stride_row, stride_col, n, padded, eps);                                         \
  }                                                                                                            \
  extern "C" __global__ void layernorm_masked_var_##S(const T* x, T* y, long long stride_row, long long stride_col, \
                                                      int n, int padded, float eps) {                         \
    layernorm<T, true>(x, y, stride_row, stride_col, n, padded, eps);                                          \
  }
CU_FOR_EACH_DTYPE(CU_LAYERNORM)
