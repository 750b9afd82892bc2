// Cross-entropy per row (no reduction), one block per row, forward and backward. The label is
// given per row. The backward's gradient is softmax(x) - onehot(label), times the upstream
// gradient. The bug rounds the true-class probability to bfloat16 before subtracting 1: for a
// near-certain row, p_true is 1 - 1e-4 or so, and in bfloat16 that is 1 (or 1 - 2^-8), so
// the true class's gradient is 0 or wildly off. The twin keeps it in float32, and computes
// p_true - 1 as -rest / sum, with `rest` the mass of the other classes, summed apart from the
// true class: 1/sum - 1 would cancel to a few float32 ulps when rest is below 1e-6 or so.
#include "common.cuh"

// The row's maximum m, and rest = sum of exp(x_j - m) over the classes other than the label:
// every thread of the block gets both.
template <typename T>
__device__ __forceinline__ void row_max_and_rest(const T* row, long long stride_col, long long label, int n,
                                                 float& m, float& rest) {
  m = CU_NEG_INF;
  for (int c = threadIdx.x; c < n; c += blockDim.x) m = fmaxf(m, to_f32(row[c * stride_col]));
  m = block_max(m);
  rest = 0.0f;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    if (c != label) rest += expf(to_f32(row[c * stride_col]) - m);
  }
  rest = block_sum(rest);
}

// loss = logsumexp(x) - x[label], computed as log(sum_j exp(x_j - m)) - (x[label] - m). When the
// label is the row's maximum (the usual case), the log is log(1 + rest) with `rest` the mass of
// the other classes: log1pf keeps its digits for a near-certain row, where log(1.0000069f) would
// lose most of them.
template <typename T>
__device__ __forceinline__ void ce_forward(const T* __restrict__ x, long long stride_row, long long stride_col,
                                           const long long* __restrict__ labels, long long label_stride,
                                           T* __restrict__ loss, int n) {
  const long long r = blockIdx.x;
  const T* row = x + r * stride_row;
  const long long label = labels[r * label_stride];
  float m, rest;
  row_max_and_rest(row, stride_col, label, n, m, rest);
  if (threadIdx.x == 0) {
    const float x_label = to_f32(row[label * stride_col]) - m;
    const float lse = x_label == 0.0f ? log1pf(rest) : logf(expf(x_label) + rest);
    loss[r] = from_f32<T>(lse - x_label);
  }
}

template <typename T, bool ROUND_TRUE>
__device__ __forceinline__ void ce_backward(const T* __restrict__ x, long long stride_row, long long stride_col,
                                            const long long* __restrict__ labels, long long label_stride,
                                            const T* __restrict__ grad_loss, long long grad_stride,
                                            T* __restrict__ grad_x, int n) {
  const long long r = blockIdx.x;
  const T* row = x + r * stride_row;
  const long long label = labels[r * label_stride];
  const float g = to_f32(grad_loss[r * grad_stride]);
  float m, rest;
  row_max_and_rest(row, stride_col, label, n, m, rest);
  const float e_label = expf(to_f32(row[label * stride_col]) - m);
  const float s = e_label + rest;
  float true_grad;
  if (ROUND_TRUE) {
    true_grad = to_f32(from_f32<bf16>(e_label / s)) - 1.0f;  // BUG: p_true rounded before p - 1
  } else {
    true_grad = -rest / s;  // p_true - 1, without the cancellation
  }
  T* out = grad_x + r * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const float p = expf(to_f32(row[c * stride_col]) - m) / s;
    out[c] = from_f32<T>((c == label ? true_grad : p) * g);
  }
}

// grid (rows,), block (1024,) at most; loss (rows,) and grad_x (rows, n) contiguous; x, labels and
// grad_loss may have any strides
#define CU_CE_BACKWARD(NAME, ROUND, T)                                                                 \
  extern "C" __global__ void __launch_bounds__(1024)                                                  \
      NAME(const T* x, long long stride_row, long long stride_col, const long long* labels,          \
           long long label_stride, const T* grad_loss, long long grad_stride, T* grad_x, int n) {    \
    ce_backward<T, ROUND>(x, stride_row, stride_col, labels, label_stride, grad_loss, grad_stride,    \
                          grad_x, n);                                                                 \
  }
#define CU_CROSS_ENTROPY(S, T)                                                                         \
  extern "C" __global__ void __launch_bounds__(1024)                                                  \
      ce_forward_##S(const T* x, long long stride_row, long long stride_col, const long long* labels, \
                     long long label_stride, T* loss, int n) {                                        \
    ce_forward<T>(x, stride_row, stride_col, labels, label_stride, loss, n);                          \
  }                                                                                                   \
  CU_CE_BACKWARD(ce_backward_bf16_true_##S, true, T)                                                  \
  CU_CE_BACKWARD(ce_backward_fp32_true_##S, false, T)
CU_FOR_EACH_DTYPE(CU_CROSS_ENTROPY)
