"""`ndarray` methods and operators with NumPy's semantics, over kiln ops."""

from __future__ import annotations

import operator

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy import _linalg, _reductions, _shape
from kiln._numpy._ufuncs import FUNCTIONS as _UFUNCS
from kiln._numpy._ufuncs import as_operand, as_tensor, spec


def _shape_args(args):
    if len(args) == 1 and not isinstance(args[0], int):
        return list(args[0])
    return list(args)


def reshape(self, *shape, order="C"):
    return _shape.reshape(self, _shape_args(shape), order)


def transpose(self, *axes):
    if not axes or (len(axes) == 1 and axes[0] is None):
        return _shape.transpose(self)
    return _shape.transpose(self, _shape_args(axes))


def flatten(self, order="C"):
    if order != "C":
        raise NotImplementedError("ndarray.flatten: only order='C' is supported by kiln")
    return self.reshape(-1).clone()


def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
    kdt = _dt.to_kiln(dtype)
    if self.dtype == kdt:
        return self.clone() if copy else self
    return self.to(kdt)


def fill(self, value):
    self.fill_(as_operand(value, self.dtype))


def sort(self, axis=-1, kind=None, order=None, *, stable=None):
    """In place, as NumPy's method (np.sort returns a copy)."""
    self.copy_(_shape.sort(self, axis))


def around(a, decimals=0, out=None):
    a = as_tensor(a, _dt.common((spec(a),)))
    if decimals == 0 or not _dt.is_float(a.dtype):
        r = kiln.round(a) if _dt.is_float(a.dtype) else a.clone()
    else:
        scale = 10.0 ** decimals
        r = kiln.round(a * scale) / scale
    if out is not None:
        out.copy_(r)
        return out
    return r


def method_round(self, decimals=0, out=None):
    return around(self, decimals, out)


def conj(self):
    return self


def nonzero_count(self, axis=None, *, keepdims=False):
    """np.count_nonzero: an int64 count (a NumPy int over everything, an array per axis)."""
    nonzero = self != 0
    if axis is None and not keepdims:
        return kiln.sum(nonzero)
    dims = tuple(range(self.dim())) if axis is None else axis
    return kiln.sum(nonzero, dim=dims, keepdim=keepdims)


METHODS = dict(_reductions.METHODS)
METHODS.update(
    reshape=reshape, transpose=transpose, flatten=flatten, ravel=_shape.ravel, copy=_shape.copy,
    astype=astype, clip=_shape.clip, round=method_round, dot=_linalg.dot, fill=fill,
    sort=sort, argsort=_shape.argsort, swapaxes=_shape.swapaxes, squeeze=_shape.squeeze,
    repeat=_shape.repeat, conj=conj, conjugate=conj, trace=_shape.trace,
    diagonal=_shape.diagonal,
)


def _inplace(ufunc):
    impl = _UFUNCS[ufunc]

    def iop(a, b):
        if not isinstance(a, kiln.Tensor):
            return impl(a, b)
        return impl(a, b, out=a)

    return iop


def _imatmul(a, b):
    r = _linalg.matmul(a, b)
    a.copy_(r)
    return a


OPERATORS = {
    operator.add: _UFUNCS[np.add], operator.sub: _UFUNCS[np.subtract],
    operator.mul: _UFUNCS[np.multiply], operator.truediv: _UFUNCS[np.true_divide],
    operator.floordiv: _UFUNCS[np.floor_divide], operator.mod: _UFUNCS[np.remainder],
    operator.pow: _UFUNCS[np.power], operator.matmul: _linalg.matmul,
    operator.and_: _UFUNCS[np.bitwise_and], operator.or_: _UFUNCS[np.bitwise_or],
    operator.xor: _UFUNCS[np.bitwise_xor], operator.lshift: _UFUNCS[np.left_shift],
    operator.rshift: _UFUNCS[np.right_shift],
    operator.lt: _UFUNCS[np.less], operator.le: _UFUNCS[np.less_equal],
    operator.gt: _UFUNCS[np.greater], operator.ge: _UFUNCS[np.greater_equal],
    operator.eq: _UFUNCS[np.equal], operator.ne: _UFUNCS[np.not_equal],
    operator.iadd: _inplace(np.add), operator.isub: _inplace(np.subtract),
    operator.imul: _inplace(np.multiply), operator.itruediv: _inplace(np.true_divide),
    operator.ifloordiv: _inplace(np.floor_divide), operator.imod: _inplace(np.remainder),
    operator.ipow: _inplace(np.power), operator.iand: _inplace(np.bitwise_and),
    operator.ior: _inplace(np.bitwise_or), operator.ixor: _inplace(np.bitwise_xor),
    operator.ilshift: _inplace(np.left_shift), operator.irshift: _inplace(np.right_shift),
    operator.imatmul: _imatmul,
    operator.neg: _UFUNCS[np.negative], operator.pos: _UFUNCS[np.positive],
    operator.invert: _UFUNCS[np.invert], operator.abs: _UFUNCS[np.absolute],
}

# Attributes computed by a function of the array (the rest are read from its metadata).
ATTRIBUTES = {"T": _shape.transpose, "mT": lambda a: a.transpose(-1, -2),
              "real": conj, "imag": kiln.zeros_like}

FUNCTIONS = {np.round: around, np.around: around, np.count_nonzero: nonzero_count}
