"""Tensor core: dtypes, views, copies, NumPy interop, type promotion of arithmetic."""

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_close, make

import kiln


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_round_trip_is_zero_copy(dtype):
    if dtype == "bfloat16":
        pytest.skip("NumPy has no bfloat16")
    arr = np.arange(12).reshape(3, 4).astype(dtype)
    t = kiln.from_numpy(arr)
    assert t.dtype.name == dtype and t.shape == (3, 4)
    back = t.numpy()
    assert np.shares_memory(arr, back)
    np.testing.assert_array_equal(back, arr)


def test_from_numpy_keeps_array_alive_and_sees_writes():
    arr = np.zeros(4, np.float32)
    t = kiln.from_numpy(arr)
    del arr
    t.fill_(2.0)
    assert t.tolist() == [2.0, 2.0, 2.0, 2.0]


def test_from_numpy_strided_view():
    arr = np.arange(20, dtype=np.float64).reshape(4, 5)[:, 1::2]
    t = kiln.from_numpy(arr)
    assert t.stride() == (5, 2)
    np.testing.assert_array_equal(t.contiguous().numpy(), arr)


def test_bad_numpy_dtype_is_a_clear_error():
    with pytest.raises(TypeError, match="complex128"):
        kiln.from_numpy(np.zeros(3, np.complex128))


def test_views_match_torch():
    tt, kt = make((2, 3, 4), "float32")
    cases = [
        lambda x: x.transpose(0, 2),
        lambda x: x.permute(2, 0, 1),
        lambda x: x.view(6, 4),
        lambda x: x.reshape(-1),
        lambda x: x.t() if x.dim() <= 2 else x.mT,
        lambda x: x.narrow(1, 1, 2),
        lambda x: x.select(2, -1),
        lambda x: x.unsqueeze(1).expand(2, 5, 3, 4),
        lambda x: x.unsqueeze(-1).squeeze(),
        lambda x: x.flatten(1),
        lambda x: x.unflatten(2, (2, 2)),
        lambda x: x.as_strided((3, 2), (1, 3)),
        lambda x: x.T,
    ]
    for f in cases:
        assert_close(f(kt), f(tt))
        assert_close(f(kt).contiguous(), f(tt).contiguous())


def test_view_shares_storage_and_version_counter():
    _, a = make((4, 4), "float32")
    v = a.view(16)
    before = a._version
    v.fill_(1.0)
    assert a._version == before + 1
    assert a.tolist()[0] == [1.0] * 4


def test_view_error_names_the_shapes():
    _, a = make((4, 6), "float32")
    with pytest.raises(RuntimeError, match=r"view: size \[24\]"):
        a.t().view(24)
    with pytest.raises(RuntimeError, match="invalid for input of size 24"):
        a.view(5, 5)


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES)
def test_casts_match_torch(src, dst):
    tt, kt = make((7, 3), src, low=-100, high=100)
    assert_close(kt.to(getattr(kiln, dst)), tt.to(getattr(torch, dst)))


@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("b", DTYPES)
def test_binary_promotion_matches_torch(a, b):
    ta, ka = make((3, 1), a, seed=1)
    tb, kb = make((4,), b, seed=2)
    assert_close(ka + kb, ta + tb)
    assert_close(ka * kb, ta * tb)
    if "bool" in (a, b):
        with pytest.raises(RuntimeError, match="bool tensor is not supported"):
            ka - kb
        return
    assert_close(ka * kb, ta * tb)
    assert_close(ka - kb, ta - tb)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [2, 2.5, True])
def test_python_scalars_are_weak(dtype, scalar):
    tt, kt = make((5,), dtype)
    assert_close(kt * scalar, tt * scalar)
    assert_close(scalar * kt, scalar * tt)


def test_zero_dim_tensor_promotion():
    ti, ki = make((3,), "int32")
    td, kd = make((), "float64")
    assert_close(ki + kd, ti + td)
    th, kh = make((3,), "float16")
    assert_close(kh + kd, th + td)


def test_broadcast_error_names_both_shapes():
    _, a = make((2, 3), "float32")
    _, b = make((4,), "float32")
    with pytest.raises(RuntimeError, match=r"\[2, 3\] and \[4\]"):
        a + b


def test_inplace_casting_rule():
    _, a = make((3,), "int64")
    with pytest.raises(RuntimeError, match="can't be cast"):
        a += 1.5
    a += 2
    assert a.dtype == kiln.int64


def test_zero_size_and_scalar_tensors():
    tt, kt = make((0, 3), "float32")
    assert_close(kt + 1, tt + 1)
    ts, ks = make((), "float32")
    assert_close(ks * ks, ts * ts)
    assert ks.dim() == 0 and ks.shape == ()


def test_large_parallel_add_matches():
    tt, kt = make((1000, 333), "float32")
    tu, ku = make((333,), "float32", seed=3)
    assert_close(kt + ku, tt + tu)
    assert_close(kt.t() + 1.0, tt.t() + 1.0)


@pytest.mark.parametrize(
    "values",
    [[[0.7379, -0.6884, -1.286], [-1.0038, -1.7336, 2.0404]], [1.0, 2.0], [0.5, float("nan")], [3]],
)
def test_repr_matches_torch(values):
    t = torch.tensor(values)
    k = kiln.tensor(values)
    assert repr(k) == repr(t)


def test_repr_names_non_default_dtypes():
    k = kiln.tensor([1, 2], dtype=kiln.int32)
    assert repr(k) == repr(torch.tensor([1, 2], dtype=torch.int32)).replace("torch.", "kiln.")


def test_import_kiln_exposes_nn():
    assert kiln.nn.Linear is not None and kiln.nn.functional.relu is not None


@pytest.mark.parametrize("shape", [(2**62,), (2**40, 2**40), (2**31, 2**31, 2**2)])
def test_impossible_shapes_raise(shape):
    with pytest.raises(RuntimeError, match="more than 2\\^63 bytes|out of memory"):
        kiln.empty(*shape)


def test_numpy_scalars_defer_to_the_tensor():
    """np.float64(2) * t is a float32 tensor, as torch's (__array_priority__), not an ndarray."""
    import numpy as np

    t = kiln.tensor([1.0, 2.0, 3.0])
    for result in (np.float64(2.0) * t, np.float32(1.5) + t, np.float64(1) - t,
                   np.int64(3) * t, t * np.float64(2.0)):
        assert isinstance(result, kiln.Tensor) and result.dtype == kiln.float32
    assert (np.float64(1) - t).tolist() == [0.0, -1.0, -2.0]
