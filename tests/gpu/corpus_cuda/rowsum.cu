// Row sums over a long reduction dim, one block per row. The bug keeps each thread's running
// sum in bfloat16: every addition rounds to 8 significant bits, so once a partial sum is large
// the small terms are lost, and the error grows with the row length. The twin accumulates in
// float32 and rounds once, at the store.
#include "common.cuh"

template <typename T, bool ACC_BF16>
__device__ __forceinline__ void rowsum(const T* __restrict__ x, T* __restrict__ out, long long stride_row,
                                       long long stride_col, long long n) {
  const T* row = x + static_cast<long long>(blockIdx.x) * stride_row;
  float acc = 0.0f;
  bf16 acc_bf16 = from_f32<bf16>(0.0f);
  for (long long c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = to_f32(row[c * stride_col]);
    if (ACC_BF16) {
      acc_bf16 = from_f32<bf16>(to_f32(acc_bf16) + v);  // BUG: a bf16 running sum
    } else {
      acc += v;
    }
  }
  if (ACC_BF16) acc = to_f32(acc_bf16);
  const float total = block_sum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = from_f32<T>(total);
}

// grid (rows,), block: a multiple of 32; out is contiguous (rows,)
#define CU_ROWSUM(S, T)                                                                                      \
  extern "C" __global__ void rowsum_bf16acc_##S(const T* x, T* out, long long stride_row, long long stride_col, \
                                                long long n) {                                                \
    rowsum<T, true>(x, out, stride_row, stride_col, n);                                                       \
  }                                                                                                           \
  extern "C" __global__ void rowsum_fp32acc_##S(const T* x, T* out, long long stride_row, long long stride_col, \
                                                long long n) {                                                \
    rowsum<T, false>(x, out, stride_row, stride_col, n);                                                      \
  }
CU_FOR_EACH_DTYPE(CU_ROWSUM)
