"""Gamma distribution."""

from __future__ import annotations

import kiln

from . import _sampling, constraints
from .exp_family import ExponentialFamily
from .utils import _is_number, _lgamma, _size, broadcast_all

__all__ = ["Gamma"]


def _standard_gamma(concentration):
    return _sampling.rsample_standard_gamma(concentration)


class Gamma(ExponentialFamily):
    """Gamma distribution with shape ``concentration`` and ``rate`` = 1 / scale.

    ``rsample`` is reparameterized with torch's implicit gradient of the standard
    gamma draw with respect to the concentration.
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def __init__(self, concentration, rate, validate_args=None) -> None:
        self.concentration, self.rate = broadcast_all(concentration, rate)
        if _is_number(concentration) and _is_number(rate):
            batch_shape = _size()
        else:
            batch_shape = self.concentration.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gamma, _instance)
        batch_shape = _size(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        new.rate = self.rate.expand(batch_shape)
        super(Gamma, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        value = _standard_gamma(self.concentration.expand(shape)) / self.rate.expand(shape)
        # Clamp the value only; the gradient stays that of the unclamped draw.
        detached = value.detach()
        tiny = kiln.finfo(value.dtype).tiny
        return value + (detached.clamp(min=tiny) - detached)

    def log_prob(self, value):
        value = kiln.as_tensor(value, dtype=self.rate.dtype, device=self.rate.device)
        if self._validate_args:
            self._validate_sample(value)
        return (
            kiln.xlogy(self.concentration, self.rate)
            + kiln.xlogy(self.concentration - 1, value)
            - self.rate * value
            - _lgamma(self.concentration)
        )

    def entropy(self):
        return (
            self.concentration
            - kiln.log(self.rate)
            + _lgamma(self.concentration)
            + (1.0 - self.concentration) * kiln.digamma(self.concentration)
        )

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return _lgamma(x + 1) + (x + 1) * kiln.log(-y.reciprocal())

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _sampling.gammainc_differentiable(self.concentration, self.rate * value)
