"""Conv1d / Conv2d / Conv3d layers (torch.nn.ConvNd), incl. padding='same'/'valid' and padding
modes (non-'zeros' modes pad with F.pad first)."""

from __future__ import annotations

import kiln
from kiln.nn import functional as F
from kiln.nn import init
from kiln.nn.modules.module import Module
from kiln.nn.modules.utils import _pair, _reverse_repeat_tuple, _single, _triple
from kiln.nn.parameter import Parameter

__all__ = ["Conv1d", "Conv2d", "Conv3d"]

_PADDING_STRINGS = {"same", "valid"}
_PADDING_MODES = {"zeros", "reflect", "replicate", "circular"}


def _check_conv_args(in_channels, out_channels, stride, padding, groups, padding_mode) -> None:
    if groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups != 0:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups != 0:
        raise ValueError("out_channels must be divisible by groups")
    if isinstance(padding, str):
        if padding not in _PADDING_STRINGS:
            raise ValueError(
                f"Invalid padding string {padding!r}, should be one of {_PADDING_STRINGS}"
            )
        if padding == "same" and any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
    if padding_mode not in _PADDING_MODES:
        raise ValueError(
            f"padding_mode must be one of {_PADDING_MODES}, but got padding_mode='{padding_mode}'"
        )


def _same_padding_pairs(kernel_size, dilation) -> list:
    """F.pad amounts (last dim first) that keep the output size for stride 1; odd totals put
    the extra element on the right, as torch does."""
    pads = [0, 0] * len(kernel_size)
    for i, (d, k) in enumerate(zip(dilation, kernel_size, strict=True)):
        total = d * (k - 1)
        j = len(kernel_size) - 1 - i
        pads[2 * j] = total // 2
        pads[2 * j + 1] = total - total // 2
    return pads


class _ConvNd(Module):
    _ntuple = staticmethod(_pair)
    _fn_name = ""

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        padding_mode="zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        nt = self._ntuple
        kernel_size, stride, dilation = nt(kernel_size), nt(stride), nt(dilation)
        padding = padding if isinstance(padding, str) else nt(padding)
        _check_conv_args(in_channels, out_channels, stride, padding, groups, padding_mode)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = False
        self.output_padding = nt(0)
        self.groups = groups
        self.padding_mode = padding_mode
        if isinstance(padding, str):
            self._reversed_padding_repeated_twice = [0, 0] * len(kernel_size)
            if padding == "same":
                self._reversed_padding_repeated_twice = _same_padding_pairs(kernel_size, dilation)
        else:
            self._reversed_padding_repeated_twice = list(_reverse_repeat_tuple(padding, 2))
        shape = (out_channels, in_channels // groups, *kernel_size)
        self.weight = Parameter(kiln.empty(shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(kiln.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's default: weight ~ kaiming_uniform_(a=sqrt(5)), bias ~ U(+-1/sqrt(fan_in))."""
        init._default_layer_init_(self.weight, self.bias)

    def _conv_forward(self, input, weight, bias):
        conv = getattr(F, self._fn_name)
        if self.padding_mode != "zeros":
            padded = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(
                padded, weight, bias, self.stride, self._ntuple(0), self.dilation, self.groups
            )
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-d convolution over (N, C_in, L) input; weight (C_out, C_in/groups, k)."""

    _ntuple = staticmethod(_single)
    _fn_name = "conv1d"


class Conv2d(_ConvNd):
    """2-d convolution over (N, C_in, H, W) input; weight (C_out, C_in/groups, kH, kW)."""

    _ntuple = staticmethod(_pair)
    _fn_name = "conv2d"


class Conv3d(_ConvNd):
    """3-d convolution over (N, C_in, D, H, W) input."""

    _ntuple = staticmethod(_triple)
    _fn_name = "conv3d"
