#pragma once
__device__ float twice(float v) {
  return v * not_declared;
}
