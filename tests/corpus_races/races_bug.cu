// Races through global memory that racecheck cannot see.

// Each block adds its row into one of `groups` partial rows under a spin lock, and releases
// the lock right after its stores: no __syncthreads() in between.
extern "C" __global__ void partial_sums(const float* x, float* partial, int* locks, int cols, int groups) {
    int row = blockIdx.x, g = row % groups, c = threadIdx.x;
    if (c >= cols) return;
    float v = x[row * cols + c];
    if (c == 0) { while (atomicCAS(&locks[g], 0, 1) != 0) {} }
    __syncthreads();
    partial[g * cols + c] += v;
    if (c == 0) atomicExch(&locks[g], 0);
}

// An embedding gradient that reads, adds and writes back without an atomic.
extern "C" __global__ void embedding_grad(const long long* ids, const float* g, float* gw, int n, int dim) {
    int i = blockIdx.x, d = threadIdx.x;
    if (i < n && d < dim) {
        long long r = ids[i];
        gw[r * dim + d] = gw[r * dim + d] + g[i * dim + d];
    }
}


// A "last block" reduction: every block writes its partial sums and raises its flag; block 0
// waits for every flag, then adds the partials up. The flag goes up right after the stores: no
// __syncthreads(), no __threadfence().
extern "C" __global__ void block_sums_flag(const float* x, float* partial, int* ready, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[i] = i < n ? x[i] : 0.0f;
    if (threadIdx.x == 0) atomicExch(&ready[blockIdx.x], 1);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float s = 0.0f;
        for (int b = 0; b < gridDim.x; ++b) {
            while (((volatile int*)ready)[b] == 0) {}
            for (int t = 0; t < blockDim.x; ++t) s += partial[b * blockDim.x + t];
        }
        *out = s;
    }
}

// The same with the barrier, and a plain store for the flag with no fence: the block's stores are
// done, but nothing makes them visible to other blocks before the flag.
extern "C" __global__ void block_sums_plain_flag(const float* x, float* partial, int* ready, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[i] = i < n ? x[i] : 0.0f;
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
