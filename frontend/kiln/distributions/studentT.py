"""Student's t-distribution."""

from __future__ import annotations

import math

import kiln

from . import constraints
from .chi2 import Chi2
from .distribution import Distribution
from .utils import _lgamma, _size, _standard_normal, broadcast_all

__all__ = ["StudentT"]


class StudentT(Distribution):
    """Student's t with ``df`` degrees of freedom, location ``loc`` and scale ``scale``."""

    arg_constraints = {
        "df": constraints.positive,
        "loc": constraints.real,
        "scale": constraints.positive,
    }
    support = constraints.real
    has_rsample = True

    @property
    def mean(self):
        return kiln.where(self.df <= 1, kiln.full_like(self.loc, math.nan), self.loc)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        df = self.df
        finite = self.scale.pow(2) * df / (df - 2)
        m = kiln.where(df > 2, finite, kiln.full_like(df, math.inf))
        return kiln.where(df <= 1, kiln.full_like(df, math.nan), m)

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None) -> None:
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(self.df.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(StudentT, _instance)
        batch_shape = _size(batch_shape)
        new.df = self.df.expand(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new._chi2 = self._chi2.expand(batch_shape)
        super(StudentT, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=()):
        # X / sqrt(Z / df) with X ~ N(0, 1), Z ~ Chi2(df): both parts reparameterized.
        shape = self._extended_shape(sample_shape)
        x = _standard_normal(shape, dtype=self.df.dtype, device=self.df.device)
        z = self._chi2.rsample(sample_shape)
        y = x * kiln.rsqrt(z / self.df)
        return self.loc + self.scale * y

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        z = (
            self.scale.log()
            + 0.5 * self.df.log()
            + 0.5 * math.log(math.pi)
            + _lgamma(0.5 * self.df)
            - _lgamma(0.5 * (self.df + 1.0))
        )
        return -0.5 * (self.df + 1.0) * kiln.log1p(y**2.0 / self.df) - z

    def entropy(self):
        lbeta = _lgamma(0.5 * self.df) + math.lgamma(0.5) - _lgamma(0.5 * (self.df + 1))
        return (
            self.scale.log()
            + 0.5
            * (self.df + 1)
            * (kiln.digamma(0.5 * (self.df + 1)) - kiln.digamma(0.5 * self.df))
            + 0.5 * self.df.log()
            + lbeta
        )
