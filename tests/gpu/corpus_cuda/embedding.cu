// An embedding: the forward gathers rows of the weight, the backward scatters the output
// gradient back into a float32 weight gradient. One block per token, threads over the columns.
// The bug stores each token's gradient row: when an id occurs more than once, the tokens
// overwrite each other and only one contribution survives. The twin adds them with atomicAdd.
#include "common.cuh"

// out (tokens, dim) contiguous; ids and weight may have any strides.
extern "C" __global__ void embedding_gather_f32(const long long* __restrict__ ids, long long ids_stride,
                                                const float* __restrict__ weight, long long w_stride_row,
                                                long long w_stride_col, float* __restrict__ out, long long dim) {
  const long long tok = blockIdx.x;
  const long long id = ids[tok * ids_stride];
  for (long long c = threadIdx.x; c < dim; c += blockDim.x) {
    out[tok * dim + c] = weight[id * w_stride_row + c * w_stride_col];
  }
}

template <bool ATOMIC>
__device__ __forceinline__ void embedding_grad(const long long* __restrict__ ids, long long ids_stride,
                                               const float* __restrict__ grad_out, long long g_stride_row,
                                               long long g_stride_col, float* __restrict__ grad_weight,
                                               long long dim) {
  const long long tok = blockIdx.x;
  const long long id = ids[tok * ids_stride];
  for (long long c = threadIdx.x; c < dim; c += blockDim.x) {
    const float g = grad_out[tok * g_stride_row + c * g_stride_col];
    if (ATOMIC) {
      atomicAdd(grad_weight + id * dim + c, g);
    } else {
      grad_weight[id * dim + c] = g;  // BUG: duplicate ids overwrite each other
    }
  }
}

// grad_weight (vocab, dim) contiguous and zeroed by the caller; grad_out may have any strides.
extern "C" __global__ void embedding_grad_store_f32(const long long* ids, long long ids_stride,
                                                    const float* grad_out, long long g_stride_row,
                                                    long long g_stride_col, float* grad_weight, long long dim) {
  embedding_grad<false>(ids, ids_stride, grad_out, g_stride_row, g_stride_col, grad_weight, dim);
}

extern "C" __global__ void embedding_grad_atomic_f32(const long long* ids, long long ids_stride,
                                                     const float* grad_out, long long g_stride_row,
                                                     long long g_stride_col, float* grad_weight, long long dim) {
  embedding_grad<true>(ids, ids_stride, grad_out, g_stride_row, g_stride_col, grad_weight, dim);
}
