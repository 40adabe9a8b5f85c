"""Tensor factories: filled tensors, ranges, *_like, new_*, eye, predicates; compared with torch."""

import numpy as np
import pytest
import torch
from conftest import DTYPES, FLOAT_DTYPES, INT_DTYPES, assert_close, make

import kiln


def kd(name):
    return getattr(kiln, name)


def td(name):
    return getattr(torch, name)


@pytest.fixture
def default_float64():
    kiln.set_default_dtype(kiln.float64)
    yield
    kiln.set_default_dtype(kiln.float32)


# ---- zeros / ones / empty / full ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["zeros", "ones"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_filled_all_dtypes(name, dtype):
    assert_close(
        getattr(kiln, name)(2, 3, dtype=kd(dtype)), getattr(torch, name)(2, 3, dtype=td(dtype))
    )


@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "rand", "randn"])
@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((2, 3), {}),
        (((2, 3),), {}),
        (([2, 3],), {}),
        ((), {"size": (2, 3)}),
        (((),), {}),
        (([],), {}),
        ((0, 3), {}),
        ((kiln.Size([4]),), {}),
    ],
)
def test_shape_forms(name, args, kwargs):
    k = getattr(kiln, name)(*args, **kwargs)
    targs = tuple(tuple(a) if isinstance(a, kiln.Size) else a for a in args)
    t = getattr(torch, name)(*targs, **kwargs)
    assert tuple(k.shape) == tuple(t.shape)
    assert k.dtype == kiln.float32 and k.is_contiguous()
    if name in ("zeros", "ones"):
        assert_close(k, t)


@pytest.mark.parametrize(
    "fill, dtype",
    [
        (True, None),
        (3, None),
        (2.5, None),
        (1.5, "int32"),
        (300, "int16"),
        (-2, "uint8"),
        (0.1, "float16"),
        (0.1, "bfloat16"),
        (7, "float64"),
        (0, "bool"),
    ],
)
def test_full_infers_dtype_like_torch(fill, dtype):
    kw_k = {} if dtype is None else {"dtype": kd(dtype)}
    kw_t = {} if dtype is None else {"dtype": td(dtype)}
    assert_close(kiln.full((2, 3), fill, **kw_k), torch.full((2, 3), fill, **kw_t))
    assert_close(kiln.full([], fill, **kw_k), torch.full([], fill, **kw_t))


@pytest.mark.parametrize(
    "fill, dtype",
    [(200, "int8"), (300, "uint8"), (-300, "uint8"), (1e10, "float16"), (1e39, "bfloat16")],
)
def test_full_overflow_is_an_error(fill, dtype):
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.full((2,), fill, dtype=getattr(torch, dtype))
    with pytest.raises(RuntimeError, match="without overflow"):
        kiln.full((2,), fill, dtype=getattr(kiln, dtype))
    with pytest.raises(RuntimeError, match="without overflow"):
        kiln.full_like(kiln.zeros(2), fill, dtype=getattr(kiln, dtype))
    with pytest.raises(RuntimeError, match="without overflow"):
        kiln.zeros(2, dtype=getattr(kiln, dtype)).new_full((2,), fill)


def test_full_accepts_a_0d_tensor_fill():
    assert_close(kiln.full((2,), kiln.tensor(4)), torch.full((2,), torch.tensor(4).item()))


def test_default_dtype_is_used_for_floats(default_float64):
    assert kiln.zeros(2).dtype == kiln.float64
    assert kiln.full((2,), 1.5).dtype == kiln.float64
    assert kiln.full((2,), 1).dtype == kiln.int64
    assert kiln.arange(0, 1, 0.5).dtype == kiln.float64
    assert kiln.linspace(0, 1, 3).dtype == kiln.float64
    assert kiln.eye(2).dtype == kiln.float64
    assert kiln.rand(2).dtype == kiln.float64
    assert kiln.tensor([1.0]).dtype == kiln.float64


def test_negative_sizes_are_rejected():
    for f in (kiln.zeros, kiln.ones, kiln.empty, kiln.rand, kiln.randn):
        with pytest.raises(RuntimeError, match="negative dimension -1"):
            f(-1, 2)
    with pytest.raises(RuntimeError, match="negative dimension"):
        kiln.full((2, -3), 1.0)


def test_bad_shape_arguments_are_type_errors():
    with pytest.raises(TypeError, match="float"):
        kiln.zeros(2.5)
    with pytest.raises(TypeError, match="size"):
        kiln.ones()
    with pytest.raises(TypeError, match="size"):
        kiln.zeros(2, size=(3,))


def test_requires_grad_only_for_floating():
    assert kiln.zeros(2, requires_grad=True).requires_grad
    assert kiln.ones(2, dtype=kiln.float16, requires_grad=True).requires_grad
    assert not kiln.zeros(2).requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.zeros(2, dtype=kiln.int32, requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.arange(3, requires_grad=True)


def test_device_argument():
    assert kiln.zeros(2, device="cpu").device == "cpu"
    assert kiln.ones(2, device=kiln.device("cpu")).device == "cpu"
    kiln.arange(3, device="cpu:0")
    for dev in ("cuda", "cuda:0", kiln.device("cuda", 0), 0):
        with pytest.raises(RuntimeError, match="no CUDA device"):
            kiln.zeros(2, device=dev)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        kiln.tensor([1], device="cuda")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        kiln.randn(2, device="cuda")
    with pytest.raises(ValueError, match="invalid device"):
        kiln.zeros(2, device="tpu")


# ---- *_like and new_* ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"]
)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_like_keeps_shape_and_dtype(name, dtype):
    t, k = make((3, 4), dtype)
    out = getattr(kiln, name)(k)
    ref = getattr(torch, name)(t)
    assert out.dtype == k.dtype and tuple(out.shape) == tuple(ref.shape)
    if name in ("zeros_like", "ones_like"):
        assert_close(out, ref)


@pytest.mark.parametrize("name", ["zeros_like", "ones_like"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_like_dtype_override(name, dtype):
    t, k = make((2, 3), "float32")
    assert_close(getattr(kiln, name)(k, dtype=kd(dtype)), getattr(torch, name)(t, dtype=td(dtype)))


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.transpose(0, 2),
        lambda x: x.permute(2, 0, 1),
        lambda x: x[:, ::2],
        lambda x: x.expand(2, 3, 4, 5),
        lambda x: x.unsqueeze(1),
        lambda x: x[:0],
    ],
)
def test_like_preserves_dense_layouts_like_torch(view):
    tv = view(torch.zeros(3, 4, 5))
    kv = view(kiln.zeros(3, 4, 5))
    for name in ("empty_like", "zeros_like", "full_like"):
        args = (1.5,) if name == "full_like" else ()
        out = getattr(kiln, name)(kv, *args)
        ref = getattr(torch, name)(tv, *args)
        assert tuple(out.shape) == tuple(ref.shape)
        assert out.stride() == ref.stride(), name
    contiguous = kiln.empty_like(kv, memory_format=kiln.contiguous_format)
    assert contiguous.is_contiguous()
    preserved = kiln.empty_like(kv, memory_format=kiln.preserve_format)
    assert preserved.stride() == torch.empty_like(tv, memory_format=torch.preserve_format).stride()


def test_full_like_and_randint_like():
    t, k = make((2, 3), "int64")
    assert_close(kiln.full_like(k, 2.7), torch.full_like(t, 2.7))
    assert_close(
        kiln.full_like(k, 2.7, dtype=kiln.float16), torch.full_like(t, 2.7, dtype=torch.float16)
    )
    r = kiln.randint_like(k, 5)
    assert r.dtype == kiln.int64 and r.shape == (2, 3)
    assert 0 <= r.min().item() and r.max().item() < 5
    r = kiln.randint_like(k.float(), 2, 5)
    assert r.dtype == kiln.float32 and 2 <= r.min().item() and r.max().item() < 5
    r = kiln.randint_like(k, high=3, dtype=kiln.uint8)
    assert r.dtype == kiln.uint8
    with pytest.raises(RuntimeError, match="low"):
        kiln.randint_like(k, 5, 5)


def test_rand_like_rejects_integer_dtypes():
    _, k = make((2,), "int64")
    with pytest.raises(NotImplementedError, match="int64"):
        kiln.rand_like(k)
    assert kiln.rand_like(k, dtype=kiln.float64).dtype == kiln.float64


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16", "bool"])
def test_new_methods_default_to_self_dtype(dtype):
    t, k = make((2, 3), dtype)
    assert_close(k.new_zeros(2, 3), t.new_zeros(2, 3))
    assert_close(k.new_ones((4,)), t.new_ones((4,)))
    assert_close(k.new_full((2,), 7), t.new_full((2,), 7))
    assert_close(k.new_zeros([2], dtype=kiln.float64), t.new_zeros([2], dtype=torch.float64))
    assert k.new_empty(5).shape == (5,) and k.new_empty(5).dtype == k.dtype
    assert k.new_ones([]).shape == ()
    assert_close(k.new_tensor([1, 0]), t.new_tensor([1, 0]))
    assert_close(
        k.new_tensor([[1.5, 0]], dtype=kiln.float64), t.new_tensor([[1.5, 0]], dtype=torch.float64)
    )


def test_new_full_truncates_into_integer_dtype():
    t, k = make((2,), "int32")
    assert_close(k.new_full((3,), 7.5), t.new_full((3,), 7.5))


# ---- eye ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, m", [(3, None), (2, 4), (4, 2), (0, None), (0, 3), (1, 1)])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "bfloat16"])
def test_eye(n, m, dtype):
    args = (n,) if m is None else (n, m)
    assert_close(kiln.eye(*args, dtype=kd(dtype)), torch.eye(*args, dtype=td(dtype)))


def test_eye_errors():
    with pytest.raises(RuntimeError, match="n must be greater or equal to 0, got -1"):
        kiln.eye(-1)
    with pytest.raises(RuntimeError, match="m must be greater or equal to 0, got -2"):
        kiln.eye(2, -2)


# ---- arange / linspace / logspace -------------------------------------------------------------


@pytest.mark.parametrize(
    "args, dtype",
    [
        ((5,), None),
        ((1, 10, 3), None),
        ((0, 1, 0.1), None),
        ((10, 0, -1.5), None),
        ((1, 2.5, 0.5), None),
        ((-3, 3, 2), "uint8"),
        ((0, 5, 1.5), "int32"),
        ((0, 5, 1.5), "int64"),
        ((0.5, 5, 1.5), "int64"),
        ((0, 3, 0.25), "float16"),
        ((0, 3, 0.25), "bfloat16"),
        ((-1, 1, 0.01), "float64"),
        ((True, 5), None),
        ((0, 0), None),
        ((5, 5, -1), None),
        ((0, 100000), "int32"),
        ((0.0, 70000.0, 1.0), "float32"),
    ],
)
def test_arange_matches_torch(args, dtype):
    kw_k = {} if dtype is None else {"dtype": kd(dtype)}
    kw_t = {} if dtype is None else {"dtype": td(dtype)}
    assert_close(kiln.arange(*args, **kw_k), torch.arange(*args, **kw_t))


def test_arange_keywords_and_tensor_arguments():
    assert_close(kiln.arange(start=2, end=8, step=2), torch.arange(start=2, end=8, step=2))
    assert_close(kiln.arange(end=4), torch.arange(end=4))
    assert_close(kiln.arange(kiln.tensor(5)), torch.arange(torch.tensor(5)))
    assert_close(kiln.arange(kiln.tensor(2.5)), torch.arange(torch.tensor(2.5)))


def test_arange_errors():
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        kiln.arange(0, 10, 0)
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        kiln.arange(10, 0, 1)
    with pytest.raises(RuntimeError, match="unsupported range"):
        kiln.arange(0, float("inf"))
    with pytest.raises(NotImplementedError, match="bool"):
        kiln.arange(5, dtype=kiln.bool)
    with pytest.raises(TypeError):
        kiln.arange("a")


@pytest.mark.parametrize(
    "dtype", [None, "float64", "float16", "bfloat16", "int64", "int16", "uint8"]
)
@pytest.mark.parametrize(
    "start, end, steps",
    [(0, 1, 5), (-1, 3, 5), (0, 10, 4), (2, -7, 7), (0, 1, 1), (0, 1, 0), (-5.5, 5.5, 101)],
)
def test_linspace_matches_torch(dtype, start, end, steps):
    if dtype == "uint8" and (start < 0 or end < 0):
        pytest.skip(
            "torch wraps negative bounds for uint8 through a C cast (implementation defined)"
        )
    kw_k = {} if dtype is None else {"dtype": kd(dtype)}
    kw_t = {} if dtype is None else {"dtype": td(dtype)}
    assert_close(
        kiln.linspace(start, end, steps, **kw_k), torch.linspace(start, end, steps, **kw_t)
    )


@pytest.mark.parametrize("dtype", [None, "float64", "int64", "bfloat16"])
@pytest.mark.parametrize(
    "start, end, steps, base",
    [(0, 2, 3, 10.0), (-2, 2, 9, 2.0), (0, 1, 1, 10.0), (1, 3, 0, 10.0), (0, 3, 4, 3.0)],
)
def test_logspace_matches_torch(dtype, start, end, steps, base):
    kw_k = {} if dtype is None else {"dtype": kd(dtype)}
    kw_t = {} if dtype is None else {"dtype": td(dtype)}
    assert_close(
        kiln.logspace(start, end, steps, base=base, **kw_k),
        torch.logspace(start, end, steps, base=base, **kw_t),
    )


def test_linspace_errors():
    with pytest.raises(RuntimeError, match="non-negative"):
        kiln.linspace(0, 1, -1)
    with pytest.raises(RuntimeError, match="non-negative"):
        kiln.logspace(0, 1, -1)
    with pytest.raises(NotImplementedError, match="bool"):
        kiln.linspace(0, 1, 3, dtype=kiln.bool)


# ---- scalar_tensor, empty_strided, predicates, tolist -----------------------------------------


@pytest.mark.parametrize("value", [1, True, 2.5, -3])
def test_scalar_tensor(value):
    assert_close(kiln.scalar_tensor(value), torch.scalar_tensor(value))
    assert_close(
        kiln.scalar_tensor(value, dtype=kiln.int32), torch.scalar_tensor(value, dtype=torch.int32)
    )


def test_empty_strided():
    k = kiln.empty_strided((2, 3), (1, 2))
    t = torch.empty_strided((2, 3), (1, 2))
    assert k.shape == (2, 3) and k.stride() == t.stride() and k.dtype == kiln.float32
    assert kiln.empty_strided((0, 4), (4, 1), dtype=kiln.int8).shape == (0, 4)
    with pytest.raises(RuntimeError, match="mismatch"):
        kiln.empty_strided((2, 3), (1,))


def test_predicates():
    k = kiln.zeros(2, 3)
    assert kiln.is_tensor(k) and not kiln.is_tensor([1]) and not kiln.is_tensor(np.zeros(2))
    assert (
        kiln.numel(k) == 6 and kiln.numel(kiln.zeros(())) == 1 and kiln.numel(kiln.zeros(0, 4)) == 0
    )
    for dtype in DTYPES:
        assert kiln.is_floating_point(kiln.zeros(1, dtype=kd(dtype))) == (dtype in FLOAT_DTYPES)
    with pytest.raises(TypeError, match="must be Tensor"):
        kiln.numel(3)
    with pytest.raises(TypeError, match="must be Tensor"):
        kiln.is_floating_point(3.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (2, 0, 2)])
def test_tolist_matches_torch(dtype, shape):
    t, k = make(shape, dtype)
    assert k.tolist() == t.tolist()
    if len(shape) == 2:
        assert k.t().tolist() == t.t().tolist()


@pytest.mark.parametrize("dtype", INT_DTYPES + ["bool"])
def test_tolist_gives_python_ints(dtype):
    _, k = make((3,), dtype)
    want = bool if dtype == "bool" else int
    assert all(type(v) is want for v in k.tolist())
