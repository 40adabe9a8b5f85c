"""Activation modules: thin wrappers over kiln.nn.functional with torch's names and reprs."""

from __future__ import annotations

import warnings

import kiln
from kiln.nn import functional as F
from kiln.nn import init
from kiln.nn.modules.module import Module
from kiln.nn.parameter import Parameter

__all__ = [
    "CELU",
    "ELU",
    "GELU",
    "GLU",
    "RReLU",
    "SELU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "LeakyReLU",
    "LogSigmoid",
    "LogSoftmax",
    "Mish",
    "PReLU",
    "ReLU",
    "ReLU6",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softmin",
    "Softplus",
    "Softsign",
    "Tanh",
    "Tanhshrink",
    "Threshold",
]


def _inplace_str(inplace: bool, lead: str = "") -> str:
    return f"{lead}inplace=True" if inplace else ""


class _InplaceActivation(Module):
    """An activation whose only setting is ``inplace``."""

    def __init__(self, inplace=False) -> None:
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return _inplace_str(self.inplace)


class ReLU(_InplaceActivation):
    """max(x, 0)."""

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)


class SiLU(_InplaceActivation):
    """x * sigmoid(x)."""

    def forward(self, input):
        return F.silu(input, inplace=self.inplace)


class Mish(_InplaceActivation):
    """x * tanh(softplus(x))."""

    def forward(self, input):
        return F.mish(input, inplace=self.inplace)


class Hardswish(_InplaceActivation):
    """x * relu6(x + 3) / 6."""

    def forward(self, input):
        return F.hardswish(input, self.inplace)


class Hardsigmoid(_InplaceActivation):
    """relu6(x + 3) / 6."""

    def forward(self, input):
        return F.hardsigmoid(input, self.inplace)


class SELU(_InplaceActivation):
    """scale * elu(x, alpha) with the self-normalizing constants."""

    def forward(self, input):
        return F.selu(input, self.inplace)


class Threshold(Module):
    """x if x > threshold else value."""

    def __init__(self, threshold, value, inplace=False) -> None:
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}{_inplace_str(self.inplace, ', ')}"


class Hardtanh(Module):
    """clamp(x, min_val, max_val)."""

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False, min_value=None, max_value=None):
        super().__init__()
        if min_value is not None:
            warnings.warn(
                "keyword argument `min_value` is deprecated and renamed to `min_val`",
                FutureWarning,
                stacklevel=2,
            )
            min_val = min_value
        if max_value is not None:
            warnings.warn(
                "keyword argument `max_value` is deprecated and renamed to `max_val`",
                FutureWarning,
                stacklevel=2,
            )
            max_val = max_value
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace
        if self.max_val <= self.min_val:
            raise AssertionError(
                f"max_val ({self.max_val}) must be greater than min_val ({self.min_val})"
            )

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_str(self.inplace, ', ')}"


class ReLU6(Hardtanh):
    """min(max(x, 0), 6)."""

    def __init__(self, inplace=False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return _inplace_str(self.inplace)


class Sigmoid(Module):
    """1 / (1 + exp(-x))."""

    def forward(self, input):
        return kiln.sigmoid(input)


class Tanh(Module):
    """tanh(x)."""

    def forward(self, input):
        return kiln.tanh(input)


class LogSigmoid(Module):
    """log(sigmoid(x))."""

    def forward(self, input):
        return F.logsigmoid(input)


class Softsign(Module):
    """x / (1 + |x|)."""

    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    """x - tanh(x)."""

    def forward(self, input):
        return F.tanhshrink(input)


class GELU(Module):
    """x * Phi(x); ``approximate='tanh'`` uses the tanh approximation."""

    def __init__(self, approximate="none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    """x if x >= 0 else negative_slope * x."""

    def __init__(self, negative_slope=1e-2, inplace=False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}{_inplace_str(self.inplace, ', ')}"


class RReLU(Module):
    """Randomized leaky ReLU: slopes drawn from [lower, upper] while training, their mean in
    evaluation."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False) -> None:
        super().__init__()
        self.lower = lower
        self.upper = upper
        self.inplace = inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}{_inplace_str(self.inplace, ', ')}"


class ELU(Module):
    """x if x > 0 else alpha * (exp(x) - 1)."""

    def __init__(self, alpha=1.0, inplace=False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}{_inplace_str(self.inplace, ', ')}"


class CELU(ELU):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta, linear above ``threshold`` for stability."""

    def __init__(self, beta=1.0, threshold=20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class GLU(Module):
    """a * sigmoid(b) where (a, b) are the halves of the input along ``dim``."""

    def __init__(self, dim=-1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def _softmax_dim(name: str, ndim: int) -> int:
    # torch's legacy rule for a Softmax built without dim (deprecated, hence the warning).
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. "
        "Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


class _SoftmaxBase(Module):
    _fn_name = ""

    def __init__(self, dim=None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim if self.dim is not None else _softmax_dim(self._fn_name, input.dim())
        return getattr(F, self._fn_name)(input, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_SoftmaxBase):
    """exp(x) / sum(exp(x)) along ``dim``."""

    _fn_name = "softmax"


class LogSoftmax(_SoftmaxBase):
    """log(softmax(x)) along ``dim``, computed stably."""

    _fn_name = "log_softmax"


class Softmin(_SoftmaxBase):
    """softmax(-x) along ``dim``."""

    _fn_name = "softmin"


class PReLU(Module):
    """x if x >= 0 else weight * x, with a learnable slope (one, or one per channel)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None) -> None:
        self.num_parameters = num_parameters
        super().__init__()
        self.init = init
        self.weight = Parameter(kiln.empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight = init."""
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"
