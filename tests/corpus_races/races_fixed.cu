// The twins of races_bug.cu.

extern "C" __global__ void partial_sums(const float* x, float* partial, int* locks, int cols, int groups) {
    int row = blockIdx.x, g = row % groups, c = threadIdx.x;
    if (c >= cols) return;
    float v = x[row * cols + c];
    if (c == 0) { while (atomicCAS(&locks[g], 0, 1) != 0) {} }
    __syncthreads();
    partial[g * cols + c] += v;
    __threadfence();
    __syncthreads();
    if (c == 0) atomicExch(&locks[g], 0);
}

// Taking the lock with an exchange (to 1) after earlier stores is an acquire, not a release.
extern "C" __global__ void flag_then_lock(float* out, int* lock) {
    out[threadIdx.x] = 1.0f;
    if (threadIdx.x == 0) { while (atomicExch(lock, 1) != 0) {} }
}

extern "C" __global__ void embedding_grad(const long long* ids, const float* g, float* gw, int n, int dim) {
    int i = blockIdx.x, d = threadIdx.x;
    if (i < n && d < dim) atomicAdd(&gw[ids[i] * dim + d], g[i * dim + d]);
}


// The flag after a fence and a barrier: every thread's partial is visible before it goes up.
extern "C" __global__ void block_sums_flag(const float* x, float* partial, int* ready, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[i] = i < n ? x[i] : 0.0f;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) ((volatile int*)ready)[blockIdx.x] = 1;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float s = 0.0f;
        for (int b = 0; b < gridDim.x; ++b) {
            while (((volatile int*)ready)[b] == 0) {}
            for (int t = 0; t < blockDim.x; ++t) s += partial[b * blockDim.x + t];
        }
        *out = s;
    }
}
