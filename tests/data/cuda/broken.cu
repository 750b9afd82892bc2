// Line 2 below has the error the compile check must point at.
__global__ void broken(float* x) { x[0] = undefined_thing; }
