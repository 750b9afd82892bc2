// Planted bug: the caller never writes the buffer that read_input reads (initcheck).
extern "C" __global__ void read_input(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;  // BUG: read_input
}
