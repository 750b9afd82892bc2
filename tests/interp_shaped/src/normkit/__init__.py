"""Normalisation and softmax kernels, written as Triton kernel libraries write them (scalar arguments
cast with ``.to()``, libdevice's ``rsqrt``, a float scale that makes half-precision data float32)."""
