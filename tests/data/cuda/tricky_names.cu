// A source written to confuse a naive "__global__" scanner.
#include <cstdint>

#define KERNEL_ATTRS __launch_bounds__(256)
#define MAYBE_GLOBAL __global__  // a macro that expands to __global__ names no kernel
#define BOUNDS(n) __launch_bounds__(n)

/* __global__ void commented_out(float* x) {} */
// __global__ void line_comment(float* x);

static const char* kHelp = "__global__ void in_a_string(float*)";

template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK) reduce_rows(const T* __restrict__ x, T* out, int64_t n) {
  (void)x; (void)out; (void)n;
}

template __global__ void reduce_rows<float, 128>(const float*, float*, int64_t);

extern "C" __global__ void plain_c(float* x) { x[0] = 1.f; }

extern "C" {
__global__ void
    in_c_block(int* y)
{
  y[0] = 2;
}
}

__global__ void KERNEL_ATTRS with_macro_attrs(float* x) { x[0] = 0.f; }
__global__ void BOUNDS(128) with_function_macro(float* x) { x[0] = 0.f; }
__global__ __attribute__((used)) void with_attribute(float* x) { x[0] = 0.f; }

namespace ops {
__global__ void in_namespace(float* x);
}
__device__ float not_a_kernel(float v) { return v; }
