"""fusekit: fused Triton kernels for training language models."""
from importlib.metadata import version

__version__ = version("fusekit")  # read from the installed distribution: importable from an install only
