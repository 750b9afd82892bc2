// Planted bug: spin_forever waits for a flag that nobody sets.
extern "C" __global__ void spin_forever(int* flag) {
  while (atomicAdd(flag, 0) == 0) {
  }
}
