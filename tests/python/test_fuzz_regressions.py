"""Regression tests for bugs found by the differential fuzzer (test_fuzz_ops.py)."""

import pytest
from conftest import assert_close, make

torch = pytest.importorskip("torch")
import kiln  # noqa: E402


@pytest.mark.parametrize("dims", [[0], [-1], 0])
def test_roll_0d_with_dims_raises(dims):
    # Used to read the size of a dimension a 0-d tensor does not have (segfault).
    with pytest.raises(IndexError, match="no dimensions"):
        torch.roll(torch.tensor(1.0), 1, dims)
    with pytest.raises(IndexError, match="no dimensions"):
        kiln.roll(kiln.tensor(1.0), 1, dims)


def test_roll_0d_without_dims():
    t, k = make([], "float32")
    assert_close(kiln.roll(k, 3), torch.roll(t, 3))


@pytest.mark.parametrize("dim", [0, -1])
def test_narrow_0d_raises(dim):
    # Used to segfault: wrapDim lets dim 0/-1 through for a 0-d tensor.
    with pytest.raises(RuntimeError, match="0-dim"):
        torch.narrow(torch.tensor(1.0), dim, 0, 0)
    with pytest.raises(RuntimeError, match="0-dim"):
        kiln.narrow(kiln.tensor(1.0), dim, 0, 0)
    with pytest.raises(RuntimeError, match="0-dim"):
        kiln.tensor(1.0).narrow(dim, 0, 0)


@pytest.mark.parametrize("op", ["size", "stride", "unbind"])
def test_dim_accessors_0d_raise(op):
    # size(0)/stride(0)/unbind(0) on a 0-d tensor read past the (empty) shape.
    with pytest.raises(IndexError, match="no dimensions"):
        getattr(torch.tensor(1.0), op)(0)
    with pytest.raises(IndexError, match="no dimensions"):
        getattr(kiln.tensor(1.0), op)(0)


def test_unflatten_0d_raises():
    with pytest.raises(RuntimeError):
        torch.tensor(1.0).unflatten(0, (1,))
    with pytest.raises(IndexError, match="no dimensions"):
        kiln.tensor(1.0).unflatten(0, (1,))


@pytest.mark.parametrize("ashape,bshape", [([4, 13, 1, 0], [0, 3]), ([2, 3, 0], [0]),
                                           ([2, 0, 0], [0, 5])])
def test_matmul_batched_zero_inner(ashape, bshape):
    # Folding the batch into rows used reshape(-1, 0), which cannot infer -1.
    ta, ka = make(ashape, "float32")
    tb, kb = make(bshape, "float32", seed=1)
    assert_close(kiln.matmul(ka, kb), torch.matmul(ta, tb))


def test_linear_zero_in_features():
    ta, ka = make([3, 2, 0], "float32")
    tw, kw = make([4, 0], "float32", seed=1)
    assert_close(kiln.nn.functional.linear(ka, kw), torch.nn.functional.linear(ta, tw))


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["fmod", "eq", "sub", "remainder"])
def test_int_tensor_rounds_to_reduced_float_before_compute(op, half):
    # An int tensor meeting a float16/bfloat16 tensor is cast to that dtype first (torch's
    # TensorIterator rule): 70000 is inf in float16 and 2049 is 2048; kiln used to go straight
    # to float32 and keep the exact integer.
    ti = torch.tensor([70000, 2049, -27993600, 5, 1 << 40])
    th = torch.tensor([3.0, 2048.0, 7.0, 2.0, 3.0], dtype=getattr(torch, half))
    ki = kiln.tensor([70000, 2049, -27993600, 5, 1 << 40])
    kh = kiln.tensor([3.0, 2048.0, 7.0, 2.0, 3.0]).to(getattr(kiln, half))
    assert_close(getattr(kiln, op)(ki, kh), getattr(torch, op)(ti, th))
    assert_close(getattr(kiln, op)(kh, ki), getattr(torch, op)(th, ti))


def test_index_broadcast_to_empty_skips_range_check():
    # x[tensor([0]), tensor([])] selects nothing; kiln checked index 0 against size 0.
    t, k = make([0, 0, 4], "int8")
    ti0, ti1 = torch.tensor([0]), torch.tensor([], dtype=torch.int64)
    ki0, ki1 = kiln.tensor([0]), kiln.tensor([], dtype=kiln.int64)
    assert_close(k[ki0, ki1], t[ti0, ti1])
    t, k = make([2, 3], "float32")
    assert_close(k[kiln.tensor([5]), ki1], t[torch.tensor([5]), ti1])


@pytest.mark.parametrize("dtype,value", [("uint8", -2.5), ("uint8", 256.0), ("int8", 300),
                                         ("int8", float("inf")), ("float16", 1e10)])
def test_fill_rejects_values_the_dtype_cannot_hold(dtype, value):
    # kiln wrapped the value silently (uint8.fill_(-2.5) gave 254).
    t, k = make([3], dtype)
    with pytest.raises(RuntimeError, match="without overflow"):
        t.fill_(value)
    with pytest.raises(RuntimeError, match="without overflow"):
        k.fill_(value)


@pytest.mark.parametrize("dtype,value", [("uint8", -1), ("int8", -2.5), ("bool", 7.5),
                                         ("float16", float("inf"))])
def test_fill_accepts_values_torch_accepts(dtype, value):
    t, k = make([3], dtype)
    assert_close(k.fill_(value), t.fill_(value))


@pytest.mark.parametrize("key", [0, slice(None), Ellipsis, "mask", "index"])
@pytest.mark.parametrize("dtype,value", [("uint8", -2.5), ("int8", 300), ("int16", float("nan"))])
def test_setitem_rejects_values_the_dtype_cannot_hold(key, dtype, value):
    # kiln wrapped the value silently (uint8 t[0] = -2.5 stored 254).
    t, k = make([4], dtype)
    tk, kk = key, key
    if key == "mask":
        tk, kk = torch.tensor([True, False, True, False]), kiln.tensor([True, False, True, False])
    elif key == "index":
        tk, kk = torch.tensor([1, 3]), kiln.tensor([1, 3])
    with pytest.raises(RuntimeError, match="without overflow"):
        t[tk] = value
    with pytest.raises(RuntimeError, match="without overflow"):
        k[kk] = value
    t[tk] = -1
    k[kk] = -1
    assert_close(k, t)


def test_setitem_float16_overflow_is_inf():
    # Unlike fill_, torch's __setitem__ lets a float16 take 1e10 as inf.
    t, k = make([4], "float16")
    t[1:] = 1e10
    k[1:] = 1e10
    assert_close(k, t)


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod"])
def test_int_divisor_zero_in_result_dtype_raises(op):
    # int32 -2^31 (0-d) is 0 once cast to the uint8 result dtype; kiln checked the uncast value
    # and then divided by zero (SIGFPE crash).
    ta = torch.tensor([9, 5], dtype=torch.uint8)
    ka = kiln.tensor([9, 5], dtype=kiln.uint8)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        getattr(torch, op)(ta, torch.tensor(-2147483648, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        getattr(kiln, op)(ka, kiln.tensor(-2147483648, dtype=kiln.int32))


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical_ops_cast_through_common_dtype(op):
    # A 0-d int64 -2^63 meeting a uint8 tensor is 0 (false) in the common dtype uint8; kiln
    # went straight to bool and got true.
    t0, k0 = torch.tensor(-(2**63)), kiln.tensor(-(2**63))
    t1 = torch.tensor([5, 0], dtype=torch.uint8)
    k1 = kiln.tensor([5, 0], dtype=kiln.uint8)
    assert_close(getattr(kiln, op)(k0, k1), getattr(torch, op)(t0, t1))
    assert_close(getattr(kiln, op)(k1, k0), getattr(torch, op)(t1, t0))
    th = torch.tensor([1.0, 0.0], dtype=torch.float16)
    kh = kiln.tensor([1.0, 0.0]).half()
    t0, k0 = torch.tensor(1e-10, dtype=torch.float64), kiln.tensor(1e-10, dtype=kiln.float64)
    assert_close(getattr(kiln, op)(k0, kh), getattr(torch, op)(t0, th))
