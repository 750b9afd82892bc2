"""How the row kernels are launched: one program per row, the whole row in one block."""
import triton


def row_block(width):
    """(BLOCK, num_warps) for rows of ``width`` elements."""
    block = triton.next_power_of_2(width)
    return block, min(32, max(4, block // 256))
