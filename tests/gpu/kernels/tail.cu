// Planted bug: the grid is rounded up to whole blocks and tail_oob has no bounds check.
extern "C" __global__ void tail_oob(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = 2.0f * x[i];  // BUG: tail_oob
}

extern "C" __global__ void tail_ok(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
