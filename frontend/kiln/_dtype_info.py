"""kiln.finfo, kiln.iinfo, kiln.result_type and kiln.can_cast: facts about dtypes, as torch
gives them. Under kiln.compile they are constants of the capture (the dtypes they read are
guarded), so model code such as ``x.masked_fill(mask, kiln.finfo(x.dtype).min)`` compiles."""

from __future__ import annotations

import numpy as np

from kiln import _C

__all__ = ["can_cast", "finfo", "iinfo", "result_type"]

_dt = _C.dtype
_FLOAT_NUMPY = {_dt.float16: np.float16, _dt.float32: np.float32, _dt.float64: np.float64}
_INT_NUMPY = {_dt.uint8: np.uint8, _dt.int8: np.int8, _dt.int16: np.int16, _dt.int32: np.int32,
              _dt.int64: np.int64}  # fmt: skip


def _short(x: float) -> str:
    return f"{x:g}"


class finfo:  # noqa: N801 - torch's name
    """Machine limits of a floating dtype (the default dtype when none is given): bits, eps,
    max, min, tiny (= smallest_normal), resolution and dtype (its name)."""

    __slots__ = ("bits", "dtype", "eps", "max", "min", "resolution", "smallest_normal", "tiny")

    def __init__(self, type=None):  # noqa: A002 - torch's argument name
        dt = _C.get_default_dtype() if type is None else type
        if not isinstance(dt, _dt):
            raise TypeError(f"finfo(): argument 'type' must be kiln.dtype, not "
                            f"{builtins_type(dt).__name__}")
        if not dt.is_floating_point:
            raise TypeError("kiln.finfo() requires a floating point input type. Use kiln.iinfo "
                            "to handle 'kiln.finfo'")
        if dt == _dt.bfloat16:  # numpy has no bfloat16: 8 exponent bits, 7 mantissa bits
            self.bits, self.eps, self.max = 16, 2.0**-7, float((2 - 2.0**-7) * 2.0**127)
            self.tiny, self.resolution = 2.0**-126, 0.01
        else:
            info = np.finfo(_FLOAT_NUMPY[dt])
            self.bits, self.eps, self.max = info.bits, float(info.eps), float(info.max)
            self.tiny, self.resolution = float(info.tiny), 10.0**-info.precision
        self.min = -self.max
        self.smallest_normal = self.tiny
        self.dtype = dt.name

    def __eq__(self, other) -> bool:
        return isinstance(other, finfo) and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash(("finfo", self.dtype))

    def __repr__(self) -> str:
        return (f"finfo(resolution={_short(self.resolution)}, min={_short(self.min)}, "
                f"max={_short(self.max)}, eps={_short(self.eps)}, "
                f"smallest_normal={_short(self.smallest_normal)}, tiny={_short(self.tiny)}, "
                f"dtype={self.dtype})")


class iinfo:  # noqa: N801 - torch's name
    """Limits of an integer dtype: bits, max, min and dtype (its name)."""

    __slots__ = ("bits", "dtype", "max", "min")

    def __init__(self, type):  # noqa: A002 - torch's argument name
        if not isinstance(type, _dt):
            raise TypeError(f"iinfo(): argument 'type' must be kiln.dtype, not "
                            f"{builtins_type(type).__name__}")
        if type == _dt.bool:
            raise TypeError("kiln.bool is not supported by kiln.iinfo")
        if type not in _INT_NUMPY:
            raise TypeError("kiln.iinfo() requires an integer input type. Use kiln.finfo to "
                            "handle 'kiln.iinfo'")
        info = np.iinfo(_INT_NUMPY[type])
        self.bits, self.max, self.min, self.dtype = info.bits, int(info.max), int(info.min), \
            type.name

    def __eq__(self, other) -> bool:
        return isinstance(other, iinfo) and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash(("iinfo", self.dtype))

    def __repr__(self) -> str:
        return f"iinfo(min={_short(self.min)}, max={_short(self.max)}, dtype={self.dtype})"


builtins_type = type


def result_type(tensor1, tensor2):
    """The dtype an elementwise op of the two operands (tensors or numbers) computes in, by
    torch's promotion rules (0-d tensors and numbers rank below dimensioned tensors): the dtype
    of an add of stand-ins of the same dtype and rank class, so no data is touched."""
    return _C.add(_stand_in(tensor1, "tensor1"), _stand_in(tensor2, "tensor2")).dtype


def _stand_in(v, name: str):
    if isinstance(v, _C.Tensor):
        return _C._empty([0], v.dtype) if v.dim() else _C._scalar_tensor(0, v.dtype)
    if isinstance(v, (bool, int, float)):
        return _C.Tensor._wrap_scalar(v)
    raise TypeError(f"result_type(): argument '{name}' must be Tensor or Number, not "
                    f"{builtins_type(v).__name__}")


def can_cast(from_, to):
    """Whether casting from `from_` to `to` is allowed by torch's same-kind rule: no float to
    integer, no non-bool to bool."""
    for name, d in (("from_", from_), ("to", to)):
        if not isinstance(d, _dt):
            raise TypeError(f"can_cast(): argument '{name}' must be kiln.dtype, not "
                            f"{builtins_type(d).__name__}")
    if from_.is_floating_point and not to.is_floating_point:
        return False
    return not (to == _dt.bool and from_ != _dt.bool)
