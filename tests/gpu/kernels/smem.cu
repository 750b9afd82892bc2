// Planted bug: smem_race reads its neighbour's shared slot without a __syncthreads.
extern "C" __global__ void smem_race(const float* x, float* y) {
  __shared__ float tile[256];
  tile[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];  // BUG: smem_race (write)
  y[blockIdx.x * 256 + threadIdx.x] = tile[(threadIdx.x + 1) % 256];  // BUG: smem_race (read)
}

extern "C" __global__ void smem_ok(const float* x, float* y) {
  __shared__ float tile[256];
  tile[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  y[blockIdx.x * 256 + threadIdx.x] = tile[(threadIdx.x + 1) % 256];
}
