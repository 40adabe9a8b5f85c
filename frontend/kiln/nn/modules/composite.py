"""Layers over the composite functionals and pads: instance norms, pixel and channel
shuffles, distances, the margin / embedding / likelihood losses, the padding layers and the
fixed-mode upsamplings, with torch's constructor arguments."""

from __future__ import annotations

from kiln.nn import functional as F
from kiln.nn.modules.batchnorm import _NormBase
from kiln.nn.modules.loss import _Loss
from kiln.nn.modules.module import Module
from kiln.nn.modules.upsampling import Upsample

__all__ = [
    "ChannelShuffle", "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d",
    "ConstantPad2d", "ConstantPad3d", "CosineEmbeddingLoss", "CosineSimilarity",
    "GaussianNLLLoss", "HingeEmbeddingLoss", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "MarginRankingLoss", "PairwiseDistance", "PixelShuffle", "PixelUnshuffle",
    "PoissonNLLLoss", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
    "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "SoftMarginLoss",
    "TripletMarginLoss", "UpsamplingBilinear2d", "UpsamplingNearest2d", "ZeroPad1d",
    "ZeroPad2d", "ZeroPad3d",
]  # fmt: skip


# --- Instance norm ------------------------------------------------------------------------------


class _InstanceNorm(_NormBase):
    """Per-(sample, channel) statistics; torch's defaults: no affine, no running statistics."""

    _spatial = 1

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None) -> None:  # fmt: skip
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, input):
        rank = self._spatial + 2
        if input.dim() not in (rank - 1, rank):
            raise ValueError(f"expected {rank - 1}D or {rank}D input (got {input.dim()}D input)")
        unbatched = input.dim() == rank - 1
        x = input.unsqueeze(0) if unbatched else input
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats, self.momentum,
                              self.eps)  # fmt: skip
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    _spatial = 3


# --- Shuffles and distances ---------------------------------------------------------------------


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)


class ChannelShuffle(Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


# --- Losses -------------------------------------------------------------------------------------


class MarginRankingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, self.margin,
                                     reduction=self.reduction)  # fmt: skip


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, self.margin,
                                       reduction=self.reduction)  # fmt: skip


class TripletMarginLoss(_Loss):
    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None,
                 reduction="mean") -> None:  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps,
                                     self.swap, reduction=self.reduction)  # fmt: skip


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full=False, eps=1e-6, reduction="mean") -> None:
        super().__init__(None, None, reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                 reduction="mean") -> None:  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps,
                                  reduction=self.reduction)  # fmt: skip


# --- Padding ------------------------------------------------------------------------------------


class _Pad(Module):
    """F.pad by `padding` (one int for every side, or torch's (left, right, top, ...) tuple)."""

    _mode, _sides = "constant", 2

    def __init__(self, padding, value=0.0) -> None:
        super().__init__()
        self.padding = tuple(padding) if isinstance(padding, (tuple, list)) else (
            (padding,) * self._sides)  # fmt: skip
        self.value = value

    def forward(self, input):
        if self._mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}" + (f", value={self.value}" if self._mode == "constant" else "")


class _ConstantPad(_Pad):
    def __init__(self, padding, value) -> None:
        super().__init__(padding, value)


class _ZeroPad(_Pad):
    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)


class _ModePad(_Pad):
    def __init__(self, padding) -> None:
        super().__init__(padding)


class ConstantPad1d(_ConstantPad):
    _mode, _sides = "constant", 2

class ZeroPad1d(_ZeroPad):
    _mode, _sides = "constant", 2

class ReflectionPad1d(_ModePad):
    _mode, _sides = "reflect", 2

class ReplicationPad1d(_ModePad):
    _mode, _sides = "replicate", 2

class CircularPad1d(_ModePad):
    _mode, _sides = "circular", 2

class ConstantPad2d(_ConstantPad):
    _mode, _sides = "constant", 4

class ZeroPad2d(_ZeroPad):
    _mode, _sides = "constant", 4

class ReflectionPad2d(_ModePad):
    _mode, _sides = "reflect", 4

class ReplicationPad2d(_ModePad):
    _mode, _sides = "replicate", 4

class CircularPad2d(_ModePad):
    _mode, _sides = "circular", 4

class ConstantPad3d(_ConstantPad):
    _mode, _sides = "constant", 6

class ZeroPad3d(_ZeroPad):
    _mode, _sides = "constant", 6

class ReflectionPad3d(_ModePad):
    _mode, _sides = "reflect", 6

class ReplicationPad3d(_ModePad):
    _mode, _sides = "replicate", 6

class CircularPad3d(_ModePad):
    _mode, _sides = "circular", 6


# --- Upsampling ---------------------------------------------------------------------------------


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
