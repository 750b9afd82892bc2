"""GPU architecture names as a policy writes them (``90``, ``"sm_90"``, ``"compute_90"``) and as the
compilers take them."""
from __future__ import annotations

from collections.abc import Iterable

DEFAULT_ARCHS = ("sm_80", "sm_90")
LINT_ARCH = "sm_90"  # the architecture whose PTX gpu-gate reads (races, 32-bit offsets)


def normalise_archs(archs: Iterable[object]) -> list[str]:
    """``90``, ``"90"``, ``"sm_90"``, ``"compute_90"`` -> ``"sm_90"`` (``"sm_90a"`` is kept)."""
    out = []
    for a in archs:
        text = str(a).strip().lower().removeprefix("sm_").removeprefix("compute_").removeprefix("sm")
        out.append(f"sm_{text}")
    return out


def arch_number(arch: str) -> int:
    return int("".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit()))


def lint_arch(archs: list[str]) -> str:
    """sm_90 if the policy builds for it, else the newest architecture it builds for."""
    return LINT_ARCH if LINT_ARCH in archs else max(archs, key=arch_number)
