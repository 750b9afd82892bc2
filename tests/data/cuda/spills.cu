// A kernel with a large, dynamically indexed local array: it needs a stack frame,
// and with a low register cap (-maxrregcount) it spills.
extern "C" __global__ void spilly(float* out, const int* idx, int n) {
  float buf[256];
  for (int k = 0; k < 256; ++k) buf[k] = out[k] * k;
  __shared__ float s[128];
  s[threadIdx.x % 128] = buf[idx[threadIdx.x] & 255];
  __syncthreads();
  float acc = 0.f;
  for (int k = 0; k < 32; ++k) acc += buf[(idx[k] + n) & 255] * s[(threadIdx.x + k) % 128];
  out[threadIdx.x] = acc;
}
