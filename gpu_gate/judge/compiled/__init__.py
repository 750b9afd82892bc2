"""Readers of compiled code (PTX) for what compute-sanitizer cannot see: races through global memory
(:mod:`.ptxlint`) and offsets computed in 32 bits (:mod:`.ptx_offsets`). The judge reads text; it
never runs what it reads."""
