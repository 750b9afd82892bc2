#pragma once
template <int S>
__device__ __forceinline__ float times(float v) { return v * S; }
