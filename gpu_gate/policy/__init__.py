"""The repository's `.gpu-gate.yml`: loaded, merged with its presets, validated into frozen records.

Import-light on purpose (no torch): `plan`, `report` and `validate-policy` use it on machines without a GPU stack.
"""
from __future__ import annotations

from .extends import PRESETS, PRESETS_DIR, preset_path
from .loader import DEFAULT_SOURCE, POLICY_NAMES, LoadedPolicy, default_policy, load_policy, validate_policy_file
from .models import (
    CacheSettings,
    CheckPolicy,
    Checks,
    CompilePolicy,
    CudaSettings,
    DeterminismPolicy,
    EquivalencePolicy,
    KernelSelection,
    Policy,
    RunnerSettings,
    SanitizerPolicy,
    Tolerance,
)

__all__ = [
    "DEFAULT_SOURCE", "POLICY_NAMES", "PRESETS", "PRESETS_DIR",
    "CacheSettings", "CheckPolicy", "Checks", "CompilePolicy", "CudaSettings", "DeterminismPolicy",
    "EquivalencePolicy", "KernelSelection", "LoadedPolicy", "Policy", "RunnerSettings", "SanitizerPolicy",
    "Tolerance", "default_policy", "load_policy", "preset_path", "validate_policy_file",
]
