"""torch's legacy typed tensor constructors: `FloatTensor(2, 3)` (zeros of those sizes),
`LongTensor([1, 2])` (that data), `DoubleTensor()` (empty). kiln's are functions, so
`isinstance(t, kiln.FloatTensor)` is not supported; compare `t.dtype` instead."""

from __future__ import annotations

from kiln import _C

_DTYPES = {
    "FloatTensor": _C.dtype.float32, "DoubleTensor": _C.dtype.float64,
    "HalfTensor": _C.dtype.float16, "BFloat16Tensor": _C.dtype.bfloat16,
    "LongTensor": _C.dtype.int64, "IntTensor": _C.dtype.int32, "ShortTensor": _C.dtype.int16,
    "CharTensor": _C.dtype.int8, "ByteTensor": _C.dtype.uint8, "BoolTensor": _C.dtype.bool,
}  # fmt: skip


def _constructor(name: str, dtype):
    def make(*args):
        return _C._legacy_tensor(dtype, *args)

    make.__name__ = make.__qualname__ = name
    make.__doc__ = f"torch.{name}(*sizes) or torch.{name}(data): a {dtype.name} tensor."
    return make


CONSTRUCTORS = {name: _constructor(name, dt) for name, dt in _DTYPES.items()}
