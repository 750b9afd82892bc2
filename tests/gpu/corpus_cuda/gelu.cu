// GELU (tanh form) over a (rows, n) tensor with any strides, into a contiguous output; one
// thread per element, grid-stride. Two of the cheats live in the kernel: one also writes the
// result back into its input (treating it as scratch), one stores zeros. The third (a cached
// output tensor) is in the Python wrapper.
#include "common.cuh"

enum GeluMode { GELU_OK = 0, GELU_WRITES_INPUT = 1, GELU_ZEROS = 2 };

template <typename T, int MODE>
__device__ __forceinline__ void gelu(T* __restrict__ x, T* __restrict__ y, long long stride_row,
                                     long long stride_col, long long rows, long long n) {
  const long long total = rows * n;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = i / n, c = i - r * n;
    T* src = x + r * stride_row + c * stride_col;
    const float v = to_f32(*src);
    float out = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    if (MODE == GELU_ZEROS) out = 0.0f;  // BUG: computes nothing
    y[i] = from_f32<T>(out);
    if (MODE == GELU_WRITES_INPUT) *src = from_f32<T>(out);  // BUG: the input is used as scratch
  }
}

// y (rows, n) contiguous; x may have any strides (the correct kernel only reads it)
#define CU_GELU(S, T)                                                                                            \
  extern "C" __global__ void gelu_##S(T* x, T* y, long long stride_row, long long stride_col, long long rows,     \
                                      long long n) {                                                             \
    gelu<T, GELU_OK>(x, y, stride_row, stride_col, rows, n);                                                     \
  }                                                                                                              \
  extern "C" __global__ void gelu_writes_input_##S(T* x, T* y, long long stride_row, long long stride_col,       \
                                                   long long rows, long long n) {                                \
    gelu<T, GELU_WRITES_INPUT>(x, y, stride_row, stride_col, rows, n);                                           \
  }                                                                                                              \
  extern "C" __global__ void gelu_zeros_##S(T* x, T* y, long long stride_row, long long stride_col, long long rows, \
                                            long long n) {                                                       \
    gelu<T, GELU_ZEROS>(x, y, stride_row, stride_col, rows, n);                                                  \
  }
CU_FOR_EACH_DTYPE(CU_GELU)
