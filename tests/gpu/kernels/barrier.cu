// Planted bug: divergent_barrier waits at a barrier only some threads of a warp reach.
extern "C" __global__ void divergent_barrier(float* y) {
  __shared__ float s[256];
  s[threadIdx.x] = threadIdx.x;
  if (threadIdx.x < 100) {
    __syncthreads();  // BUG: divergent_barrier
  }
  y[blockIdx.x * 256 + threadIdx.x] = s[threadIdx.x];
}

extern "C" __global__ void uniform_barrier(float* y) {
  __shared__ float s[256];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  y[blockIdx.x * 256 + threadIdx.x] = s[255 - threadIdx.x];
}
