"""ConvTranspose1d/2d/3d: transposed convolutions (the adjoint of Conv), weight
(C_in, C_out / groups, *kernel), torch's arguments, initialization and state_dict names."""

from __future__ import annotations

import kiln
from kiln.nn import functional as F
from kiln.nn import init
from kiln.nn.modules.conv import _ConvNd
from kiln.nn.modules.module import Module
from kiln.nn.modules.utils import _pair, _single, _triple
from kiln.nn.parameter import Parameter

__all__ = ["ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]


class _ConvTransposeNd(Module):
    _ntuple = staticmethod(_pair)
    _fn_name = ""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None) -> None:  # fmt: skip
        super().__init__()
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if in_channels % groups or out_channels % groups:
            raise ValueError("in_channels and out_channels must be divisible by groups")
        nt = self._ntuple
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = nt(kernel_size), nt(stride), nt(padding)
        self.output_padding, self.dilation = nt(output_padding), nt(dilation)
        self.groups, self.padding_mode, self.transposed = groups, padding_mode, True
        shape = (in_channels, out_channels // groups, *self.kernel_size)
        self.weight = Parameter(kiln.empty(shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(kiln.empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's default: weight ~ kaiming_uniform_(a=sqrt(5)), bias ~ U(+-1/sqrt(fan_in))."""
        init._default_layer_init_(self.weight, self.bias)

    def _output_padding(self, input, output_size):
        """output_padding, or the one that makes the result `output_size` (torch's rule)."""
        if output_size is None:
            return self.output_padding
        nd = len(self.kernel_size)
        size = list(output_size)[-nd:]
        pads = []
        for d in range(nd):
            smallest = ((input.shape[input.dim() - nd + d] - 1) * self.stride[d]
                        - 2 * self.padding[d] + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            if not smallest <= size[d] < smallest + self.stride[d]:
                raise ValueError(f"requested an output size of {list(output_size)}, but valid "
                                 f"sizes range from {smallest} to {smallest + self.stride[d] - 1}"
                                 f" (for an input of {list(input.shape)[2:]})")  # fmt: skip
            pads.append(size[d] - smallest)
        return tuple(pads)

    def forward(self, input, output_size=None):
        conv = getattr(F, self._fn_name)
        return conv(input, self.weight, self.bias, self.stride, self.padding,
                    self._output_padding(input, output_size), self.groups, self.dilation)

    extra_repr = _ConvNd.extra_repr  # the same fields, output_padding included


class ConvTranspose1d(_ConvTransposeNd):
    _ntuple = staticmethod(_single)
    _fn_name = "conv_transpose1d"


class ConvTranspose2d(_ConvTransposeNd):
    _ntuple = staticmethod(_pair)
    _fn_name = "conv_transpose2d"


class ConvTranspose3d(_ConvTransposeNd):
    """(forward only: its derivative is not implemented yet)"""

    _ntuple = staticmethod(_triple)
    _fn_name = "conv_transpose3d"
