// A clean kernel: compiles for every target.
#include "good_helpers.cuh"

template <int SCALE>
__global__ void __launch_bounds__(256) scale_tail(float* __restrict__ x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = times<SCALE>(x[i]);
}

template __global__ void scale_tail<2>(float*, int);

extern "C" __global__ void add_one(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
