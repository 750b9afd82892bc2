"""What the doctor examines on a runner (``gpu-gate doctor``, and ``check`` before its jobs): the GPUs
through NVML (:mod:`.gpus`) and the tools gpu-gate needs, with CUDA proven to work through them
(:mod:`.tools`). The records they fill are :mod:`.model`'s; the verdict is the doctor's
(gpu_gate.commands.doctor)."""
