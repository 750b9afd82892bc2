// The same kernels with the row offset widened before the product.
extern "C" __global__ void scale_rows(float* y, const float* x, int stride, int n_cols) {
    long long row = blockIdx.x;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) {
        y[row * stride + c] = 2.0f * x[row * stride + c];
    }
}

extern "C" __global__ void flat_copy(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // the usual global index: no runtime factor
    if (i < n) y[i] = x[i];
}
