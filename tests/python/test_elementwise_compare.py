"""Comparisons, equal/isclose/allclose, logical and bitwise ops, compared with PyTorch."""

import operator

import numpy as np
import pytest
import torch
from conftest import DTYPES, FLOAT_DTYPES, INT_DTYPES, assert_close, make, to_kiln

import kiln


def mirror(kfn, tfn, kargs, targs):
    """kfn(*kargs) must match tfn(*targs), or raise the same exception type torch raises."""
    try:
        expected = tfn(*targs)
    except Exception as e:
        with pytest.raises(type(e)):
            kfn(*kargs)
        return
    assert_close(kfn(*kargs), expected)


def with_specials(dtype, seed):
    """Random values plus NaN, +-inf and ties for floating dtypes."""
    t, _ = make((12,), dtype, seed=seed)
    if dtype in FLOAT_DTYPES:
        t[:5] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, 1.0])
    return t, to_kiln(t)


COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less",
               "less_equal", "not_equal"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", COMPARISONS)
def test_comparisons_match_torch(name, dtype):
    ta, ka = with_specials(dtype, 1)
    tb, kb = with_specials(dtype, 2)
    tb[7] = ta[7]  # at least one tie
    kb = to_kiln(tb)
    kfn, tfn = getattr(kiln, name), getattr(torch, name)
    mirror(kfn, tfn, (ka, kb), (ta, tb))
    mirror(kfn, tfn, (ka.view(3, 4), kb.view(4, 3).t()), (ta.view(3, 4), tb.view(4, 3).t()))
    mirror(kfn, tfn, (ka.view(3, 4), kb.narrow(0, 0, 4)), (ta.view(3, 4), tb[:4]))
    for scalar in [1, 0.5, True, -2]:
        mirror(kfn, tfn, (ka, scalar), (ta, scalar))
        mirror(lambda a, s: getattr(a, name)(s), lambda a, s: getattr(a, name)(s),
               (ka, scalar), (ta, scalar))


@pytest.mark.parametrize("pair", [("int32", "float32"), ("uint8", "int8"), ("bool", "float16"),
                                  ("float16", "bfloat16"), ("int64", "float64")])
def test_comparisons_mixed_dtypes(pair):
    ta, ka = with_specials(pair[0], 1)
    tb, kb = with_specials(pair[1], 2)
    for name in ["eq", "lt", "ge"]:
        mirror(getattr(kiln, name), getattr(torch, name), (ka, kb), (ta, tb))


OPS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


@pytest.mark.parametrize("op", OPS)
def test_comparison_operators_and_reflection(op):
    f = OPS[op]
    ta, ka = make((3, 4), "float32", seed=1)
    tb, kb = make((4,), "int64", seed=2)
    assert_close(f(ka, kb), f(ta, tb))
    for s in [0, 0.25, -1]:
        assert_close(f(ka, s), f(ta, s))
        assert_close(f(s, ka), f(s, ta))
    t0, k0 = make((), "float64", seed=3)
    assert_close(f(k0, ka), f(t0, ta))
    tz, kz = make((0, 4), "float32")
    assert_close(f(kz, kb), f(tz, tb))


def test_comparisons_inplace_write_self_dtype():
    ta, ka = make((3, 4), "float32", seed=1)
    tb, kb = make((4,), "float32", seed=2)
    for name in ["eq_", "lt_", "ge_", "not_equal_"]:
        k, t = ka.clone(), ta.clone()
        assert getattr(k, name)(kb) is k
        getattr(t, name)(tb)
        assert_close(k, t)


def test_equality_with_non_tensors_is_not_an_error():
    _, ka = make((3,), "float32")
    assert (ka == "abc") is False
    assert (ka != None) is True  # noqa: E711
    assert ka not in [None, "x"]
    with pytest.raises(TypeError):
        ka < "abc"  # noqa: B015


def test_comparison_broadcast_error():
    _, a = make((2, 3), "float32")
    _, b = make((2,), "float32")
    with pytest.raises(RuntimeError, match=r"lt: shapes \[2, 3\] and \[2\] cannot be broadcast"):
        kiln.lt(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_equal(dtype):
    ta, ka = make((3, 4), dtype)
    assert kiln.equal(ka, ka.clone()) is True
    assert ka.equal(ka.t().contiguous().t()) is True
    tb, kb = make((3, 4), dtype, seed=9)
    assert kiln.equal(ka, kb) == torch.equal(ta, tb)
    assert kiln.equal(ka, ka.view(4, 3)) is False  # same values, other shape
    assert kiln.equal(ka, ka.to(kiln.float64)) == torch.equal(ta, ta.double())
    if dtype in FLOAT_DTYPES:
        tn, kn = with_specials(dtype, 1)
        assert kiln.equal(kn, kn) == torch.equal(tn, tn)  # NaN != NaN
    assert kiln.equal(make((0,), dtype)[1], make((0,), dtype)[1]) is True


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kwargs", [{}, {"rtol": 0.1, "atol": 0.5}, {"equal_nan": True},
                                    {"rtol": 0.0, "atol": 0.0}])
def test_isclose_and_allclose(dtype, kwargs):
    ta, ka = with_specials(dtype, 1)
    tb = ta.clone()
    if dtype in FLOAT_DTYPES:
        tb[5:] = tb[5:] + torch.linspace(0, 1, 7).to(tb.dtype)
        tb[0] = float("nan")
        tb[2] = float("inf")
    elif dtype != "bool":
        tb[5:] = tb[5:] + 1
    kb = to_kiln(tb)
    mirror(lambda a, b: kiln.isclose(a, b, **kwargs), lambda a, b: torch.isclose(a, b, **kwargs),
           (ka, kb), (ta, tb))
    assert kiln.allclose(ka, kb, **kwargs) == torch.allclose(ta, tb, **kwargs)
    assert ka.allclose(ka, **kwargs) == ta.allclose(ta, **kwargs)
    assert_close(ka.isclose(kb.view(12), **kwargs), ta.isclose(tb, **kwargs))


def test_isclose_errors():
    _, a = make((3,), "float32")
    _, b = make((3,), "float64")
    with pytest.raises(RuntimeError, match="isclose: expected both inputs to have the same dtype"):
        kiln.isclose(a, b)
    with pytest.raises(RuntimeError, match="rtol must be greater than or equal to zero"):
        kiln.isclose(a, a, rtol=-1.0)
    with pytest.raises(RuntimeError, match="atol must be greater than or equal to zero"):
        kiln.allclose(a, a, atol=-1.0)


LOGICAL = ["logical_and", "logical_or", "logical_xor"]


@pytest.mark.parametrize("pair", [(d, d) for d in DTYPES] + [("float32", "int8"),
                                                               ("bool", "float16")])
@pytest.mark.parametrize("name", LOGICAL)
def test_logical_binary(name, pair):
    ta, ka = with_specials(pair[0], 1)
    tb, kb = with_specials(pair[1], 2)
    ta[6] = 0
    tb[6:9] = 0
    ka, kb = to_kiln(ta), to_kiln(tb)
    kfn, tfn = getattr(kiln, name), getattr(torch, name)
    mirror(kfn, tfn, (ka, kb), (ta, tb))
    mirror(kfn, tfn, (ka.view(3, 4), kb.view(4, 3).t()), (ta.view(3, 4), tb.view(4, 3).t()))
    k, t = ka.clone(), ta.clone()
    getattr(k, name + "_")(kb)
    getattr(t, name + "_")(tb)
    assert_close(k, t)


@pytest.mark.parametrize("dtype", DTYPES)
def test_logical_not(dtype):
    ta, ka = with_specials(dtype, 1)
    assert_close(kiln.logical_not(ka), torch.logical_not(ta))
    assert_close(ka.logical_not(), ta.logical_not())
    k, t = ka.clone(), ta.clone()
    k.logical_not_()
    t.logical_not_()
    assert_close(k, t)


BITWISE = {
    "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    "bitwise_left_shift": lambda a, b: a << b,
    "bitwise_right_shift": lambda a, b: a >> b,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BITWISE)
def test_bitwise_binary(name, dtype):
    ta, ka = make((3, 4), dtype, seed=1, low=-40, high=40)
    tb, kb = make((4,), dtype, seed=2)
    if "shift" in name and dtype in INT_DTYPES:
        # Include shifts past the bit width and negative shifts (torch defines both).
        tb = torch.tensor([0, 3, 9, 70 if dtype == "int64" else 17], dtype=getattr(torch, dtype))
        if dtype != "uint8":
            tb[3] = -2
        kb = to_kiln(tb)
    kfn, tfn, op = getattr(kiln, name), getattr(torch, name), BITWISE[name]
    mirror(kfn, tfn, (ka, kb), (ta, tb))
    mirror(op, op, (ka, kb), (ta, tb))
    mirror(op, op, (ka.t(), kb.narrow(0, 0, 3)), (ta.t(), tb[:3]))
    for s in [3, True]:
        mirror(op, op, (ka, s), (ta, s))
        mirror(op, op, (s, ka), (s, ta))


@pytest.mark.parametrize("name", BITWISE)
def test_bitwise_inplace_and_mixed(name):
    op = BITWISE[name]
    ta, ka = make((3, 4), "int32", seed=1, low=-40, high=40)
    tb, kb = make((4,), "uint8", seed=2)
    mirror(op, op, (ka, kb), (ta, tb))
    k, t = ka.clone(), ta.clone()
    getattr(k, name + "_")(kb)
    getattr(t, name + "_")(tb)
    assert_close(k, t)
    k = ka.clone()
    iop = {"bitwise_and": operator.iand, "bitwise_or": operator.ior, "bitwise_xor": operator.ixor,
           "bitwise_left_shift": operator.ilshift, "bitwise_right_shift": operator.irshift}[name]
    assert iop(k, kb) is k
    assert_close(k, op(ta, tb))


@pytest.mark.parametrize("dtype", DTYPES)
def test_bitwise_not_and_invert(dtype):
    ta, ka = make((3, 4), dtype, seed=1)
    mirror(kiln.bitwise_not, torch.bitwise_not, (ka,), (ta,))
    mirror(lambda a: ~a, lambda a: ~a, (ka,), (ta,))


def test_bitwise_errors_name_the_dtype():
    _, f = make((3,), "float32")
    _, i = make((3,), "int32")
    with pytest.raises(NotImplementedError, match="bitwise_and: not implemented for dtype float32"):
        f & i
    with pytest.raises(NotImplementedError, match="bitwise_not: not implemented for dtype float32"):
        kiln.bitwise_not(f)
    with pytest.raises(TypeError, match="only implemented on integer and bool tensors"):
        f.__invert__()
    with pytest.raises(NotImplementedError, match="bitwise_left_shift: .* dtype bool"):
        make((3,), "bool")[1] << True
    with pytest.raises(NotImplementedError, match="float32"):
        i | 1.5


def test_where_of_comparisons_on_large_tensors():
    ta, ka = make((200, 300), "float32", seed=1)
    mask_t, mask_k = (ta > 0) & (ta < 1), (ka > 0) & (ka < 1)
    assert_close(mask_k, mask_t)
    assert int(np.asarray(mask_k.numpy()).sum()) == int(mask_t.sum())
