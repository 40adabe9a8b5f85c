"""Abstract base class for probability distributions (torch.distributions.Distribution)."""

from __future__ import annotations

import warnings

import kiln

from . import constraints
from .utils import _size, lazy_property

__all__ = ["Distribution"]


def _require(valid, short: str, message) -> None:
    """Raises ValueError(message()) unless every element of `valid` holds. In compiled code the
    check runs with the graph as an assertion node (AssertionError with the `short` message,
    which names no values: they are not known when the graph is built)."""
    if kiln.compiler.is_compiling():
        kiln._assert(valid.all(), short)
    elif not bool(valid.all()):
        raise ValueError(message())


class Distribution:
    """Base class: batch_shape indexes independent parameterizations, event_shape
    is the shape of one draw.

    Args:
        batch_shape: the shape over which parameters are batched.
        event_shape: the shape of a single sample (without batching).
        validate_args: whether to validate arguments; None keeps the class default.
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Globally enable or disable argument validation (on unless ``python -O``)."""
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None) -> None:
        self._batch_shape = _size(batch_shape)
        self._event_shape = _size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(
                    f"{self.__class__} does not define `arg_constraints`. "
                    + "Please set `arg_constraints = {}` or initialize the distribution "
                    + "with `validate_args=False` to turn off validation.",
                    stacklevel=2,
                )
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue  # cannot be checked
                if param not in self.__dict__ and isinstance(
                    getattr(type(self), param), lazy_property
                ):
                    continue  # not constructed; checking would force it
                value = getattr(self, param)
                _require(constraint.check(value),
                         f"Expected parameter {param} of distribution "
                         f"{type(self).__name__} to satisfy the constraint "
                         f"{type(constraint).__name__}",
                         lambda param=param, value=value, constraint=constraint: (
                             f"Expected parameter {param} "
                             f"({type(value).__name__} of shape {tuple(value.shape)}) "
                             f"of distribution {repr(self)} "
                             f"to satisfy the constraint {repr(constraint)}, "
                             f"but found invalid values:\n{value}"))  # fmt: skip
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A new distribution whose parameters are expanded (not copied) to ``batch_shape``."""
        raise NotImplementedError

    @property
    def batch_shape(self) -> kiln.Size:
        return self._batch_shape

    @property
    def event_shape(self) -> kiln.Size:
        return self._event_shape

    @property
    def arg_constraints(self) -> dict:
        raise NotImplementedError

    @property
    def support(self):
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        with kiln.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError

    def sample_n(self, n: int):
        warnings.warn(
            "`sample_n(n)` will be deprecated. Use `sample((n,))` instead.",
            FutureWarning,
            stacklevel=2,
        )
        return self.sample(kiln.Size((n,)))

    def log_prob(self, value):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def icdf(self, value):
        raise NotImplementedError

    def enumerate_support(self, expand: bool = True):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def perplexity(self):
        return kiln.exp(self.entropy())

    def _extended_shape(self, sample_shape=()) -> kiln.Size:
        """``sample_shape + batch_shape + event_shape``."""
        shape = tuple(_size(sample_shape)) + tuple(self._batch_shape) + tuple(self._event_shape)
        return _size(shape)

    def _validate_sample(self, value) -> None:
        """Raise ValueError unless ``value`` broadcasts with the distribution and lies in
        its support."""
        if not isinstance(value, kiln.Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")

        event_dim_start = len(value.size()) - len(self._event_shape)
        if tuple(value.size()[event_dim_start:]) != tuple(self._event_shape):
            raise ValueError(
                "The right-most size of value must match event_shape: "
                f"{value.size()} vs {self._event_shape}."
            )

        actual_shape = value.size()
        expected_shape = _size(tuple(self._batch_shape) + tuple(self._event_shape))
        for i, j in zip(reversed(actual_shape), reversed(expected_shape), strict=False):
            if i != 1 and j != 1 and i != j:
                raise ValueError(
                    "Value is not broadcastable with batch_shape+event_shape: "
                    f"{actual_shape} vs {expected_shape}."
                )
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(
                f"{self.__class__} does not define `support` to enable "
                + "sample validation. Please initialize the distribution with "
                + "`validate_args=False` to turn off validation.",
                stacklevel=2,
            )
            return
        if support is None:
            raise AssertionError("support is unexpectedly None")
        _require(support.check(value),
                 f"Expected value argument to be within the support "
                 f"({type(support).__name__}) of the distribution {type(self).__name__}",
                 lambda: ("Expected value argument "
                          f"({type(value).__name__} of shape {tuple(value.shape)}) "
                          f"to be within the support ({repr(support)}) "
                          f"of the distribution {repr(self)}, "
                          f"but found invalid values:\n{value}"))  # fmt: skip

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                "__init__ method must also define a custom .expand() method."
            )
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self) -> str:
        param_names = [k for k in self.arg_constraints if k in self.__dict__]
        parts = []
        for p in param_names:
            value = self.__dict__[p]
            parts.append(f"{p}: {value if value.numel() == 1 else value.size()}")
        args_string = ", ".join(parts)
        return self.__class__.__name__ + "(" + args_string + ")"
