"""Functional forms (kiln.nn.functional) for matrix products: linear and bilinear."""

from kiln import _C

__all__ = ["linear", "bilinear"]


def linear(input, weight, bias=None):  # noqa: A002 - torch's argument name
    """F.linear: ``input @ weight.T + bias`` over any number of leading dims of input."""
    return _C._linear(input, weight, bias)


def bilinear(input1, input2, weight, bias=None):
    """F.bilinear: ``y[..., o] = x1[..., i] * weight[o, i, j] * x2[..., j] + bias[o]``."""
    return _C.bilinear(input1, input2, weight, bias)
