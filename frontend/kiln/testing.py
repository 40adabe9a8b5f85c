"""kiln.testing: torch.testing's ``assert_close`` and ``make_tensor``.

``assert_close`` follows torch's rules and messages: inputs are compared pairwise through nested
sequences and mappings; tensors must match in shape (and, unless disabled, device and dtype),
then ``|actual - expected| <= atol + rtol * |expected|`` elementwise, with per-dtype default
tolerances (exact for integers and bools). A mismatch raises AssertionError with torch's text
("Tensor-likes are not close!", the mismatch count, the greatest absolute and relative
differences), so tests that match on it keep working.
"""

from __future__ import annotations

import collections.abc
import math
import warnings

import kiln

__all__ = ["assert_allclose", "assert_close", "make_tensor"]

_DTYPE_PRECISIONS = {
    kiln.float16: (0.001, 1e-5),
    kiln.bfloat16: (0.016, 1e-5),
    kiln.float32: (1.3e-6, 1e-5),
    kiln.float64: (1e-7, 1e-7),
}
# Python numbers as torch sees them: int64, float64, complex128.
_NUMBER_PRECISIONS = {int: (0.0, 0.0), float: (1e-7, 1e-7), complex: (1e-7, 1e-7)}
_INTEGRAL = (kiln.uint8, kiln.int8, kiln.int16, kiln.int32, kiln.int64)
_FLOATING = (kiln.float16, kiln.bfloat16, kiln.float32, kiln.float64)


class _Mismatch(Exception):
    """A failed comparison: the exception type to raise, its message, and where it happened."""

    def __init__(self, type_, msg: str, id_=()) -> None:
        super().__init__(msg)
        self.type, self.msg, self.id = type_, msg, id_

    def to_error(self, msg=None) -> Exception:
        if not isinstance(msg, str):
            generated = self.msg
            if self.id:
                where = "".join(str([item]) for item in self.id)
                generated += f"\n\nThe failure occurred for item {where}"
            msg = msg(generated) if callable(msg) else generated
        return self.type(msg)


class _Unsupported(Exception):
    pass


def _tolerances(precisions, rtol, atol, id_) -> tuple:
    """The given tolerances, or the loosest defaults of the inputs' (rtol, atol) pairs."""
    if (rtol is None) ^ (atol is None):
        raise _Mismatch(ValueError, "Both 'rtol' and 'atol' must be either specified or omitted, "
                        f"but got no {'rtol' if rtol is None else 'atol'}.", id_)
    if rtol is not None:
        return rtol, atol
    rtols, atols = zip(*precisions, strict=True)
    return max(rtols), max(atols)


def _mismatch_msg(identifier, default, extra, abs_diff, abs_idx, atol, rel_diff, rel_idx,
                  rtol) -> str:
    equality = rtol == 0 and atol == 0

    def diff_msg(kind, diff, idx, tol):
        msg = (f"{kind.title()} difference: {diff}" if idx is None
               else f"Greatest {kind} difference: {diff} at index {idx}")
        return msg + ("" if equality else f" (up to {tol} allowed)") + "\n"

    if identifier is None:
        identifier = default
    elif callable(identifier):
        identifier = identifier(default)
    msg = f"{identifier} are not {'equal' if equality else 'close'}!\n\n"
    if extra:
        msg += f"{extra.strip()}\n"
    msg += diff_msg("absolute", abs_diff, abs_idx, atol)
    msg += diff_msg("relative", rel_diff, rel_idx, rtol)
    return msg.strip()


def _scalar_msg(actual, expected, rtol, atol) -> str:
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return _mismatch_msg(None, "Scalars", f"Expected {expected} but got {actual}.", abs_diff,
                         None, atol, rel_diff, None, rtol)


def _tensor_msg(actual, expected, matches, rtol, atol) -> str:
    shape = tuple(matches.shape)

    def unravel(flat: int) -> tuple:
        index = []
        for size in shape[::-1]:
            flat, mod = divmod(flat, size)
            index.append(mod)
        return tuple(index[::-1])

    total = matches.numel()
    mismatches = total - int(kiln.sum(matches))
    extra = f"Mismatched elements: {mismatches} / {total} ({mismatches / total:.1%})"
    a, e, m = actual.flatten(), expected.flatten(), matches.flatten()
    if not a.is_floating_point():
        a, e = a.to(kiln.int64), e.to(kiln.int64)
    abs_diff = kiln.where(m, 0, kiln.abs(a - e))  # only mismatches count
    max_abs, abs_idx = kiln.max(abs_diff, 0)
    rel_diff = kiln.where(m, 0, abs_diff / kiln.abs(e))
    max_rel, rel_idx = kiln.max(rel_diff, 0)
    return _mismatch_msg(None, "Tensor-likes", extra, max_abs.item(), unravel(int(abs_idx)),
                         atol, max_rel.item(), unravel(int(rel_idx)), rtol)


def _numpy():
    import sys

    return sys.modules.get("numpy")


def _compare_none(actual, expected, id_, **_):
    if not (actual is None or expected is None):
        raise _Unsupported
    if not (actual is None and expected is None):
        raise _Mismatch(AssertionError, f"None mismatch: {actual} is not {expected}", id_)


def _compare_bool(actual, expected, id_, **_):
    np = _numpy()
    kinds = (bool,) if np is None else (bool, np.bool_)
    if not (isinstance(actual, kinds) and isinstance(expected, kinds)):
        raise _Unsupported
    actual, expected = bool(actual), bool(expected)
    if actual is not expected:
        raise _Mismatch(AssertionError, f"Booleans mismatch: {actual} is not {expected}", id_)


def _compare_number(actual, expected, id_, *, rtol, atol, equal_nan, check_dtype, **_):
    np = _numpy()
    kinds = (int, float, complex) if np is None else (int, float, complex, np.number)
    if not (isinstance(actual, kinds) and isinstance(expected, kinds)):
        raise _Unsupported
    if np is not None:
        actual, expected = (x.item() if isinstance(x, np.number) else x
                            for x in (actual, expected))
    rtol, atol = _tolerances([_NUMBER_PRECISIONS.get(type(x), (1e-7, 1e-7))
                              for x in (actual, expected)], rtol, atol, id_)
    if check_dtype and type(actual) is not type(expected):
        raise _Mismatch(AssertionError, "The (d)types do not match: "
                        f"{type(actual)} != {type(expected)}.", id_)
    if actual == expected:
        return
    if equal_nan and _isnan(actual) and _isnan(expected):
        return
    abs_diff = abs(actual - expected)
    if _isfinite(abs_diff) and abs_diff <= atol + rtol * abs(expected):
        return
    raise _Mismatch(AssertionError, _scalar_msg(actual, expected, rtol, atol), id_)


def _isnan(x) -> bool:
    return math.isnan(x.real) or math.isnan(x.imag) if isinstance(x, complex) else math.isnan(x)


def _isfinite(x) -> bool:
    return math.isfinite(x)


def _to_tensor(x):
    if isinstance(x, kiln.Tensor):
        return x
    try:
        return kiln.as_tensor(x)
    except Exception:  # noqa: BLE001 - not tensor-like: another comparison may take it
        raise _Unsupported from None


def _compare_tensors(actual, expected, id_, *, allow_subclasses, rtol, atol, equal_nan,
                     check_device, check_dtype, check_stride, **_):
    if not (isinstance(actual, type(expected)) or isinstance(expected, type(actual))):
        raise _Unsupported
    if not allow_subclasses and type(actual) is not type(expected):
        raise _Unsupported
    actual, expected = _to_tensor(actual), _to_tensor(expected)
    rtol, atol = _tolerances([_DTYPE_PRECISIONS.get(t.dtype, (0.0, 0.0))
                              for t in (actual, expected)], rtol, atol, id_)

    def attribute_mismatch(name, a, e):
        raise _Mismatch(AssertionError,
                        f"The values for attribute '{name}' do not match: {a} != {e}.", id_)

    if actual.shape != expected.shape:
        attribute_mismatch("shape", actual.shape, expected.shape)
    if check_stride and actual.stride() != expected.stride():
        attribute_mismatch("stride()", actual.stride(), expected.stride())
    if check_device and actual.device != expected.device:
        attribute_mismatch("device", actual.device, expected.device)
    if check_dtype and actual.dtype != expected.dtype:
        attribute_mismatch("dtype", actual.dtype, expected.dtype)
    actual, expected = actual.detach(), expected.detach()
    if actual.device != expected.device:
        actual, expected = actual.cpu(), expected.cpu()
    if actual.dtype != expected.dtype:
        dtype = kiln.promote_types(actual.dtype, expected.dtype)
        actual, expected = actual.to(dtype), expected.to(dtype)
    matches = kiln.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if bool(kiln.all(matches)):
        return
    if actual.dim() == 0:
        msg = _scalar_msg(actual.item(), expected.item(), rtol, atol)
    else:
        msg = _tensor_msg(actual, expected, matches, rtol, atol)
    raise _Mismatch(AssertionError, msg, id_)


_COMPARISONS = (_compare_none, _compare_bool, _compare_number, _compare_tensors)


def _compare(actual, expected, id_, options) -> None:
    seq, mapping = collections.abc.Sequence, collections.abc.Mapping
    if (isinstance(actual, seq) and not isinstance(actual, str)
            and isinstance(expected, seq) and not isinstance(expected, str)):
        if len(actual) != len(expected):
            raise _Mismatch(AssertionError, "The length of the sequences mismatch: "
                            f"{len(actual)} != {len(expected)}", id_)
        for i in range(len(actual)):
            _compare(actual[i], expected[i], (*id_, i), options)
        return
    if isinstance(actual, mapping) and isinstance(expected, mapping):
        a_keys, e_keys = set(actual.keys()), set(expected.keys())
        if a_keys != e_keys:
            raise _Mismatch(AssertionError, "The keys of the mappings do not match:\n"
                            f"Missing keys in the actual mapping: {sorted(e_keys - a_keys)}\n"
                            "Additional keys in the actual mapping: "
                            f"{sorted(a_keys - e_keys)}", id_)
        keys = list(a_keys)
        try:
            keys = sorted(keys)
        except TypeError:
            pass
        for key in keys:
            _compare(actual[key], expected[key], (*id_, key), options)
        return
    for compare in _COMPARISONS:
        try:
            return compare(actual, expected, id_, **options)
        except _Unsupported:
            continue
    raise _Mismatch(TypeError, "No comparison pair was able to handle inputs of type "
                    f"{type(actual)} and {type(expected)}.", id_)


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None,
                 equal_nan=False, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False, msg=None) -> None:
    """Raises unless ``actual`` and ``expected`` are close (see the module doc). ``msg``
    replaces the message (a string) or rewrites it (a callable taking torch's text)."""
    __tracebackhide__ = True
    options = dict(allow_subclasses=allow_subclasses, rtol=rtol, atol=atol, equal_nan=equal_nan,
                   check_device=check_device, check_dtype=check_dtype, check_stride=check_stride)
    try:
        _compare(actual, expected, (), options)
    except _Mismatch as mismatch:
        raise mismatch.to_error(msg) from None


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg="") -> None:
    """torch's deprecated spelling: dtypes may differ, NaNs are equal by default."""
    warnings.warn("`torch.testing.assert_allclose()` is deprecated since 1.12 and will be "
                  "removed in a future release. Please use `torch.testing.assert_close()` "
                  "instead.", FutureWarning, stacklevel=2)
    if not isinstance(actual, kiln.Tensor):
        actual = kiln.tensor(actual)
    if not isinstance(expected, kiln.Tensor):
        expected = kiln.tensor(expected, dtype=actual.dtype)
    if rtol is None and atol is None:
        loose = {kiln.float16: (1e-3, 1e-3), kiln.float32: (1e-4, 1e-5),
                 kiln.float64: (1e-5, 1e-8)}
        rtol = max(loose.get(t.dtype, (0.0, 0.0))[0] for t in (actual, expected))
        atol = max(loose.get(t.dtype, (0.0, 0.0))[1] for t in (actual, expected))
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                 check_device=True, check_dtype=False, check_stride=False, msg=msg or None)


def make_tensor(*shape, dtype, device=None, low=None, high=None, requires_grad=False,
                noncontiguous=False, exclude_zero=False, memory_format=None):
    """A tensor of ``shape`` filled with random values in ``[low, high)`` (torch's defaults:
    [-9, 9) for floats, [-9, 10) for integers, both values for bools)."""

    def modify_low_high(low, high, *, lowest_inclusive, highest_exclusive, default_low,
                        default_high):
        low = default_low if low is None else low
        high = default_high if high is None else high
        if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
            raise ValueError(f"`low` and `high` cannot be NaN, but got low={low!r} and "
                             f"high={high!r}")
        if low == high and dtype in _FLOATING:
            warnings.warn("Passing `low==high` to `torch.testing.make_tensor` for floating or "
                          "complex types is deprecated since 2.1 and will be removed in 2.3. "
                          "Use `torch.full(...)` instead.", FutureWarning, stacklevel=3)
        elif low >= high:
            raise ValueError(f"`low` must be less than `high`, but got {low} >= {high}")
        elif high < lowest_inclusive or low >= highest_exclusive:
            raise ValueError(f"The value interval specified by `low` and `high` is [{low}, "
                             f"{high}), but {dtype} only supports [{lowest_inclusive}, "
                             f"{highest_exclusive})")
        low = min(max(low, lowest_inclusive), highest_exclusive)
        high = min(max(high, lowest_inclusive), highest_exclusive)
        if dtype is kiln.bool or dtype in _INTEGRAL:
            return math.ceil(low), math.ceil(high)
        return low, high

    if len(shape) == 1 and isinstance(shape[0], collections.abc.Sequence):
        shape = shape[0]
    shape = tuple(shape)
    if noncontiguous and memory_format is not None:
        raise ValueError("The parameters `noncontiguous` and `memory_format` are mutually "
                         f"exclusive, but got noncontiguous={noncontiguous!r} and "
                         f"memory_format={memory_format!r}")
    if requires_grad and (dtype is kiln.bool or dtype in _INTEGRAL):
        raise ValueError("`requires_grad=True` is not supported for boolean and integral "
                         f"dtypes, but got dtype={dtype!r}")
    noncontiguous = noncontiguous and math.prod(shape) > 1
    if noncontiguous:
        shape = (*shape[:-1], 2 * shape[-1])
    if dtype is kiln.bool:
        low, high = modify_low_high(low, high, lowest_inclusive=0, highest_exclusive=2,
                                    default_low=0, default_high=2)
        result = kiln.randint(low, high, shape, device=device, dtype=dtype)
    elif dtype in _INTEGRAL:
        info = kiln.iinfo(dtype)
        low, high = modify_low_high(
            low, high, lowest_inclusive=info.min,
            highest_exclusive=info.max + (1 if dtype is not kiln.int64 else 0),
            default_low=-9, default_high=10)
        result = kiln.randint(low, high, shape, device=device, dtype=dtype)
    elif dtype in _FLOATING:
        info = kiln.finfo(dtype)
        low, high = modify_low_high(low, high, lowest_inclusive=info.min,
                                    highest_exclusive=info.max, default_low=-9, default_high=9)
        result = kiln.empty(shape, device=device, dtype=dtype)
        if high - low >= info.max:  # the width itself would overflow
            result.uniform_(low / 2, high / 2).mul_(2)
        else:
            result.uniform_(low, high)
    else:
        raise TypeError(f"The requested dtype '{dtype}' is not supported by "
                        "kiln.testing.make_tensor().")
    if noncontiguous:
        result = result[..., 1::2]
    elif memory_format is not None:
        result = result.clone(memory_format=memory_format)
    if exclude_zero:
        tiny = 1 if dtype is kiln.bool or dtype in _INTEGRAL else kiln.finfo(dtype).tiny
        result.masked_fill_(result == 0, tiny)
    if dtype in _FLOATING:
        result.requires_grad = requires_grad
    return result
