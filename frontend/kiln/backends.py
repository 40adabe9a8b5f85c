"""kiln.backends: torch.backends' switches that training scripts set.

``cuda.matmul.allow_tf32``, ``cudnn.allow_tf32``, ``cudnn.benchmark`` and
``cudnn.deterministic`` are accepted and recorded: kiln's float32 GEMMs never use TF32, and its
kernels are deterministic, so they change nothing. ``cpu.get_cpu_capability()`` names the
vector ISA kiln's eager float kernels run with; ``mps.is_available()`` is False.
"""

from __future__ import annotations

import types

from kiln._blas_env import _cpu_flags

_matmul = types.SimpleNamespace(
    allow_tf32=False,
    allow_fp16_reduced_precision_reduction=True,
    allow_bf16_reduced_precision_reduction=True,
)
cuda = types.SimpleNamespace(matmul=_matmul)
cudnn = types.SimpleNamespace(allow_tf32=True, benchmark=False, deterministic=False, enabled=True)


def _cpu_capability() -> str:
    flags = _cpu_flags()
    if {"avx512f", "avx512bw"} <= flags:
        return "AVX512"
    return "AVX2" if "avx2" in flags else "DEFAULT"


cpu = types.SimpleNamespace(get_cpu_capability=_cpu_capability)
# Apple's Metal backend: never present (device-picking code asks before falling back)
mps = types.SimpleNamespace(is_available=lambda: False, is_built=lambda: False)

_precision = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    """torch.set_float32_matmul_precision: recorded ("highest", "high" or "medium"); kiln's
    float32 GEMMs always compute in float32, so every setting gives full precision."""
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision {precision}, expected one of: highest, high, "
                           "medium")
    _precision[0] = precision


def get_float32_matmul_precision() -> str:
    return _precision[0]


_deterministic = {"mode": False, "warn_only": False}


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms: recorded; kiln's kernels give the same results run
    after run for the same inputs and thread count, so there is nothing to switch."""
    if not isinstance(mode, bool):
        raise TypeError(f"use_deterministic_algorithms(): mode must be a bool, not "
                        f"{type(mode).__name__}")
    _deterministic.update(mode=mode, warn_only=bool(warn_only))


def are_deterministic_algorithms_enabled() -> bool:
    return _deterministic["mode"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _deterministic["warn_only"]
