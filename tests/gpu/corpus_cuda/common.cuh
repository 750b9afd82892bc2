// Shared pieces of the CUDA corpus: the three storage dtypes, float conversions, block
// reductions and the macro that instantiates a kernel once per dtype as an extern "C" name.
//
// Every kernel computes in float32 and stores in its dtype (float, half or bfloat16). The
// types come from <cuda_fp16.h>/<cuda_bf16.h> when NVRTC can see the CUDA headers (gpu-gate
// passes the toolkit's include directory when it finds one). An install that has NVRTC but no
// toolkit headers (a pip wheel) gets a two-byte stand-in with the same round-to-nearest-even
// conversions instead, so that the corpus compiles there too. Defining
// CU_CORPUS_NO_CUDA_HEADERS forces the stand-in (the CPU test compiles both ways).
#pragma once

#if !defined(CU_CORPUS_NO_CUDA_HEADERS) && defined(__has_include)
#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define CU_CORPUS_CUDA_HEADERS 1
#endif
#endif

#define CU_FULL_MASK 0xffffffffu
#define CU_NEG_INF __uint_as_float(0xff800000u)  // -inf without <math.h>

#ifdef CU_CORPUS_CUDA_HEADERS
typedef __half f16;
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float to_f32(f16 v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ f16 from_f32<f16>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }
#else
struct __align__(2) f16 { unsigned short bits; };
struct __align__(2) bf16 { unsigned short bits; };

__device__ __forceinline__ float to_f32(f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
__device__ __forceinline__ float to_f32(bf16 v) { return __uint_as_float(static_cast<unsigned>(v.bits) << 16); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ f16 from_f32<f16>(float v) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float v) {
  unsigned u = __float_as_uint(v);
  bf16 b;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b.bits = static_cast<unsigned short>((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    b.bits = static_cast<unsigned short>(u >> 16);
  }
  return b;
}
#endif

__device__ __forceinline__ float to_f32(float v) { return v; }
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduce one float per thread over the block; every thread gets the result. blockDim.x must be
// a multiple of 32 and every thread of the block must call it (it synchronizes the block).
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned warps = (blockDim.x + 31u) >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(CU_FULL_MASK, v, offset));
  __syncthreads();  // an earlier call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : identity;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(CU_FULL_MASK, v, offset));
  return v;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, SumOp(), 0.0f); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, MaxOp(), CU_NEG_INF); }

// CU_FOR_EACH_DTYPE(M) expands M(suffix, type) for float32, float16 and bfloat16: the kernel
// names end in _f32, _f16 and _bf16 (cu_kernels.py picks one from the tensor's dtype).
#define CU_FOR_EACH_DTYPE(M) M(f32, float) M(f16, f16) M(bf16, bf16)
