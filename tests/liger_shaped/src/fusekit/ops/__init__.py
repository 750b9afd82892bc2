from fusekit.ops.gated_silu import GatedSiLU, gated_silu_backward, gated_silu_forward

__all__ = ["GatedSiLU", "gated_silu_backward", "gated_silu_forward"]
