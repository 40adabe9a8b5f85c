"""torch's ``_foreach_*`` functions: one op over lists of tensors (EMA updates, hand-written
optimizers: timm's ModelEmaV3, diffusers' EMAModel). Written in kiln ops, one tensor at a time:
eagerly each is the op on every tensor of the list; inside compiled code the capture inlines
this module (its name starts with kiln._ops_composite), so the updates compile with the code
around them.

The second operand is what torch takes: a number, a list of numbers, a list of tensors, or one
tensor for every item. ``_foreach_f`` returns new tensors, ``_foreach_f_`` updates the first
list in place.
"""

from __future__ import annotations

import kiln

_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
          "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
          "round", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")  # fmt: skip
_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow")
_POINTWISE = ("addcmul", "addcdiv")


def _tensors(name: str, tensors) -> list:
    if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, kiln.Tensor)
                                                         for t in tensors):  # fmt: skip
        raise TypeError(f"{name}(): argument 'self' must be a list of Tensors")
    return list(tensors)


def _each(name: str, other, n: int) -> list:
    """`other` per item: a list of the same length, or one value for every item."""
    if isinstance(other, (list, tuple)):
        if len(other) != n:
            raise RuntimeError(f"{name}(): tensor lists must have the same number of tensors, "
                               f"got {n} and {len(other)}")
        return list(other)
    return [other] * n


def _unary(op: str, inplace: bool):
    name = f"_foreach_{op}{'_' if inplace else ''}"

    def fn(self):
        tensors = _tensors(name, self)
        if inplace:
            for t in tensors:
                getattr(t, op + "_")()
            return None
        return [getattr(kiln, op)(t) for t in tensors]

    fn.__name__ = fn.__qualname__ = name
    return fn


def _binary(op: str, inplace: bool):
    name = f"_foreach_{op}{'_' if inplace else ''}"

    def apply(t, o, alpha):
        if op in ("add", "sub"):
            extra = {} if alpha == 1 else {"alpha": alpha}
            return getattr(t, op + "_")(o, **extra) if inplace else getattr(kiln, op)(t, o,
                                                                                      **extra)
        if op in ("maximum", "minimum") or op in ("clamp_min", "clamp_max") and isinstance(
            o, kiln.Tensor
        ):  # no in-place spelling of these: the result written into t
            both = "maximum" if op in ("maximum", "clamp_min") else "minimum"
            o = o if isinstance(o, kiln.Tensor) else kiln.full_like(t, o)
            result = getattr(kiln, both)(t, o)
            return t.copy_(result) if inplace else result
        return getattr(t, op + "_")(o) if inplace else getattr(kiln, op)(t, o)

    def fn(self, other, *, alpha=1):
        tensors = _tensors(name, self)
        out = [apply(t, o, alpha)
               for t, o in zip(tensors, _each(name, other, len(tensors)), strict=True)]
        return None if inplace else out

    fn.__name__ = fn.__qualname__ = name
    return fn


def _pointwise(op: str, inplace: bool):
    """addcmul / addcdiv: self + value * t1 (*, /) t2, the value per item or one for all."""
    name = f"_foreach_{op}{'_' if inplace else ''}"

    def fn(self, tensor1, tensor2, value=1):
        tensors = _tensors(name, self)
        n = len(tensors)
        out = []
        for t, a, b, v in zip(tensors, _each(name, tensor1, n), _each(name, tensor2, n),
                              _each(name, value, n), strict=True):  # fmt: skip
            v = v.item() if isinstance(v, kiln.Tensor) else v
            out.append(getattr(t, op + "_")(a, b, value=v) if inplace
                       else getattr(kiln, op)(t, a, b, value=v))  # fmt: skip
        return None if inplace else out

    fn.__name__ = fn.__qualname__ = name
    return fn


def _lerp(inplace: bool):
    name = f"_foreach_lerp{'_' if inplace else ''}"

    def fn(self, tensors1, weight):
        tensors = _tensors(name, self)
        n = len(tensors)
        out = [t.lerp_(e, w) if inplace else kiln.lerp(t, e, w)
               for t, e, w in zip(tensors, _each(name, tensors1, n), _each(name, weight, n),
                                  strict=True)]  # fmt: skip
        return None if inplace else out

    fn.__name__ = fn.__qualname__ = name
    return fn


def _foreach_zero_(self):
    for t in _tensors("_foreach_zero_", self):
        t.zero_()


def _foreach_copy_(self, src, non_blocking=False):
    for t, s in zip(_tensors("_foreach_copy_", self), _each("_foreach_copy_", src, len(self)),
                    strict=True):  # fmt: skip
        t.copy_(s)


def _foreach_norm(self, ord=2, dtype=None):  # noqa: A002 - torch's name
    return [kiln.linalg.vector_norm(t, ord, dtype=dtype) for t in _tensors("_foreach_norm", self)]


FUNCTIONS = {"_foreach_zero_": _foreach_zero_, "_foreach_copy_": _foreach_copy_,
             "_foreach_norm": _foreach_norm}  # fmt: skip
for _op in _UNARY:
    for _inplace in (False, True):
        _f = _unary(_op, _inplace)
        FUNCTIONS[_f.__name__] = _f
for _op in _BINARY:
    for _inplace in (False, True):
        _f = _binary(_op, _inplace)
        FUNCTIONS[_f.__name__] = _f
for _op in _POINTWISE:
    for _inplace in (False, True):
        _f = _pointwise(_op, _inplace)
        FUNCTIONS[_f.__name__] = _f
for _inplace in (False, True):
    _f = _lerp(_inplace)
    FUNCTIONS[_f.__name__] = _f
globals().update(FUNCTIONS)
