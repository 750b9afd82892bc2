// Row-wise CUDA kernels with the row offset computed in 32 bits.
extern "C" __global__ void scale_rows(float* y, const float* x, int stride, int n_cols) {
    int row = blockIdx.x;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        y[row * stride + c] = 2.0f * x[row * stride + c];
    }
}

extern "C" __global__ void gather_rows(float* y, const float* x, const int* rows, int stride, int n_cols) {
    int r = rows[blockIdx.x];  // a loaded row index, times the stride: data, not the program index
    long long out = (long long)blockIdx.x * stride;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        y[out + c] = x[(long long)r * stride + c];
    }
}
