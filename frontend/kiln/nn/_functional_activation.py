"""Elementwise activation functions of kiln.nn.functional (torch's names and signatures).

Every activation of the op table (``ir/ops.def``) is bound from its row in ``kiln._C._nn``, its
``inplace=True`` writing into ``input``; only ``prelu``, ``glu`` and ``rrelu``, which have no
row, are written here.
"""

from kiln import _C

__all__ = [
    "celu",
    "celu_",
    "elu",
    "elu_",
    "gelu",
    "glu",
    "hardshrink",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "hardtanh_",
    "leaky_relu",
    "leaky_relu_",
    "logsigmoid",
    "mish",
    "prelu",
    "relu",
    "relu6",
    "relu_",
    "rrelu",
    "rrelu_",
    "selu",
    "selu_",
    "sigmoid",
    "silu",
    "softplus",
    "softshrink",
    "softsign",
    "tanh",
    "tanhshrink",
    "threshold",
    "threshold_",
]

celu = _C._nn.celu
celu_ = _C._nn.celu_
elu = _C._nn.elu
elu_ = _C._nn.elu_
gelu = _C._nn.gelu
hardshrink = _C._nn.hardshrink
hardsigmoid = _C._nn.hardsigmoid
hardswish = _C._nn.hardswish
hardtanh = _C._nn.hardtanh
hardtanh_ = _C._nn.hardtanh_
leaky_relu = _C._nn.leaky_relu
leaky_relu_ = _C._nn.leaky_relu_
logsigmoid = _C._nn.logsigmoid
mish = _C._nn.mish
relu = _C._nn.relu
relu6 = _C._nn.relu6
relu_ = _C._nn.relu_
selu = _C._nn.selu
selu_ = _C._nn.selu_
sigmoid = _C._nn.sigmoid
silu = _C._nn.silu
softplus = _C._nn.softplus
softshrink = _C._nn.softshrink
softsign = _C._nn.softsign
tanh = _C._nn.tanh
tanhshrink = _C._nn.tanhshrink
threshold = _C._nn.threshold
threshold_ = _C._nn.threshold_


def prelu(input, weight):
    """max(0, x) + weight * min(0, x), with one weight per channel (dim 1) or one shared."""
    import kiln

    if not isinstance(weight, kiln.Tensor):
        raise TypeError(f"prelu: weight must be a kiln.Tensor, got {type(weight).__name__}")
    if weight.dtype != input.dtype:
        raise RuntimeError(
            f"prelu: type promoting not supported. Got {input.dtype.name} and {weight.dtype.name}"
        )
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"prelu: not implemented for dtype {input.dtype.name}")
    if weight.numel() != 1:
        channels = input.size(1) if input.dim() >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError(
                "prelu: mismatch of parameter numbers and input channel size. Found parameter "
                f"numbers = {weight.numel()} and channel size = {channels}."
            )
        shape = [1] * input.dim()
        shape[1] = channels
        weight = weight.reshape(shape)
    elif input.dim() > 0:
        weight = weight.reshape([1] * input.dim())
    else:
        weight = weight.reshape(())
    return kiln.where(input > 0, input, weight * input)


def glu(input, dim=-1):
    """a * sigmoid(b), where a and b are the two halves of input along dim."""
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"glu: not implemented for dtype {input.dtype.name}")
    n = input.size(dim)
    if n % 2:
        raise RuntimeError(f"glu: halving dimension must be even, but dimension {dim} is size {n}")
    a = input.narrow(dim, 0, n // 2)
    return a * _C._nn.sigmoid(input.narrow(dim, n // 2, n // 2))


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: while training, each negative element is scaled by a slope drawn
    uniformly from [lower, upper]; in evaluation by their mean (leaky_relu)."""
    import kiln

    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace=inplace)
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"rrelu: not implemented for dtype {input.dtype.name}")
    slope = kiln.empty_like(input).uniform_(lower, upper)
    result = kiln.where(input >= 0, input, input * slope)
    return input.copy_(result) if inplace else result


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, inplace=True)
