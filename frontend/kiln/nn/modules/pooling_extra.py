"""The 3-d pooling layers and the power-average (LP) pools (torch.nn's MaxPool3d, AvgPool3d,
AdaptiveAvgPool3d, AdaptiveMaxPool3d and LPPool1d/2d/3d)."""

from __future__ import annotations

from kiln.nn import functional as F
from kiln.nn.modules.module import Module
from kiln.nn.modules.pooling import (
    _AdaptiveAvgPoolNd,
    _AdaptiveMaxPoolNd,
    _AvgPoolNd,
    _MaxPoolNd,
)

__all__ = [
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool3d",
    "AvgPool3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxPool3d",
]


class MaxPool3d(_MaxPoolNd):
    """Max over sliding windows of (N, C, D, H, W) or (C, D, H, W) input."""

    _fn_name = "max_pool3d"


class AvgPool3d(_AvgPoolNd):
    """Mean over sliding windows of (N, C, D, H, W) or (C, D, H, W) input."""

    _fn_name = "avg_pool3d"


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """Average pooling to a fixed (D, H, W) output size (None keeps that input dim)."""

    _fn_name = "adaptive_avg_pool3d"


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Max pooling to a fixed (D, H, W) output size."""

    _fn_name = "adaptive_max_pool3d"


class _LPPoolNd(Module):
    _fn_name = ""

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False) -> None:
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return getattr(F, self._fn_name)(
            input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode
        )

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"ceil_mode={self.ceil_mode}"
        )


class LPPool1d(_LPPoolNd):
    """(sum of x^p over each window)^(1/p) on (N, C, L) or (C, L) input."""

    _fn_name = "lp_pool1d"


class LPPool2d(_LPPoolNd):
    """(sum of x^p over each window)^(1/p) on (N, C, H, W) or (C, H, W) input."""

    _fn_name = "lp_pool2d"


class LPPool3d(_LPPoolNd):
    """(sum of x^p over each window)^(1/p) on (N, C, D, H, W) or (C, D, H, W) input."""

    _fn_name = "lp_pool3d"
