"""What gpu-gate keeps between runs, outside every sandbox: job results (:mod:`.results`), the base's
compiled Triton kernels (:mod:`.compiled`), bytecode of the runner's own packages (:mod:`.bytecode`)
and what reading a Python module found (:mod:`.scans`)."""
