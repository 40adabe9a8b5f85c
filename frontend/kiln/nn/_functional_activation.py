"""Elementwise activation functions of kiln.nn.functional (torch's names and signatures).

The kernels are the ``kiln._C`` activation ops; this module only maps the ``inplace=`` flag onto
their in-place forms (which write the result into ``input`` and return it).
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

gelu = _C.gelu
softplus = _C.softplus
logsigmoid = _C.logsigmoid
softsign = _C.softsign
tanhshrink = _C.tanhshrink
hardshrink = _C.hardshrink
softshrink = _C.softshrink
sigmoid = _C.sigmoid
tanh = _C.tanh
relu_ = _C.relu_
elu_ = _C.elu_
selu_ = _C.selu_
celu_ = _C.celu_
leaky_relu_ = _C.leaky_relu_
hardtanh_ = _C.hardtanh_
threshold_ = _C.threshold_


def relu(input, inplace=False):
    return _C.relu_(input) if inplace else _C.relu(input)


def relu6(input, inplace=False):
    return _C.relu6_(input) if inplace else _C.relu6(input)


def silu(input, inplace=False):
    return _C.silu_(input) if inplace else _C.silu(input)


def selu(input, inplace=False):
    return _C.selu_(input) if inplace else _C.selu(input)


def hardsigmoid(input, inplace=False):
    return _C.hardsigmoid_(input) if inplace else _C.hardsigmoid(input)


def hardswish(input, inplace=False):
    return _C.hardswish_(input) if inplace else _C.hardswish(input)


def mish(input, inplace=False):
    return _C.mish_(input) if inplace else _C.mish(input)


def elu(input, alpha=1.0, inplace=False):
    return _C.elu_(input, alpha) if inplace else _C.elu(input, alpha)


def celu(input, alpha=1.0, inplace=False):
    return _C.celu_(input, alpha) if inplace else _C.celu(input, alpha)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    if inplace:
        return _C.leaky_relu_(input, negative_slope)
    return _C.leaky_relu(input, negative_slope)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if inplace:
        return _C.hardtanh_(input, min_val, max_val)
    return _C.hardtanh(input, min_val, max_val)


def threshold(input, threshold, value, inplace=False):
    if inplace:
        return _C.threshold_(input, threshold, value)
    return _C.threshold(input, threshold, value)


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
    return a * _C.sigmoid(input.narrow(dim, n // 2, n // 2))
