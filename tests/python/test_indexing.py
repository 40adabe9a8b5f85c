"""Tensor.__getitem__ / __setitem__ (basic and advanced indexing) vs torch."""

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_close, make, to_kiln

import kiln


def to_k(index):
    """The same index expression with torch tensors replaced by kiln copies."""
    if isinstance(index, torch.Tensor):
        return to_kiln(index)
    if isinstance(index, tuple):
        return tuple(to_k(i) for i in index)
    if isinstance(index, list):
        return [to_k(i) for i in index]
    return index


T = torch.tensor
BASIC = [
    0,
    -1,
    (1, 2),
    (-2, -1, 0),
    slice(None),
    slice(1, None),
    slice(-2, None),
    slice(None, -1),
    slice(None, None, 2),
    slice(-100, 100, 3),
    slice(3, 1),
    (slice(None), 1),
    (Ellipsis, 0),
    (0, Ellipsis, slice(1, 3)),
    (None, 1),
    (slice(None), None, slice(None), None),
    (Ellipsis, None),
    (None, Ellipsis, None),
    (),
    Ellipsis,
    (1, slice(0, 2), -1),
    np.int64(1),
]
ADVANCED = [
    T([0, 2]),
    T([-1, 0, 0]),
    [0, 2],
    [2],
    [[0, 1], [1, 2]],  # torch treats a short nested list as a tuple of indices
    [True, False, True],
    (T([0, 2]), T([1, 3])),
    (T([[0], [2]]), T([1, 3])),  # broadcast together
    (slice(None), T([0, 3])),
    (T([1]), slice(None), T([0, 2])),  # separated: result dims go first
    (slice(None), T([[0, 1]]), T([2])),  # adjacent, in the middle
    (Ellipsis, T([1, 0])),
    (None, T([1, 0]), None),
    (T([0, 2]), 1),
    (1, slice(None), T([1, 2])),
    T(1),  # a 0-d integer tensor selects, like an int
    (T(2), T([0, 1])),
    T([0, 1], dtype=torch.int32),
    T([], dtype=torch.int64),
    [],
    True,
    False,
    (Ellipsis, True),
    T(True),
    (0, T(False)),
    np.array([0, 2]),
]


def get_both(shape, dtype, index, transpose=False):
    t, k = make(shape, dtype)
    if transpose:
        t, k = t.transpose(0, -1), k.transpose(0, -1)
    return k[to_k(index)], t[index]


@pytest.mark.parametrize("index", BASIC, ids=repr)
def test_getitem_basic(index):
    got, want = get_both((3, 4, 5), "float32", index)
    assert_close(got, want)


@pytest.mark.parametrize("index", ADVANCED, ids=repr)
def test_getitem_advanced(index):
    got, want = get_both((3, 4, 5), "float32", index)
    assert_close(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_getitem_dtypes_and_layouts(dtype):
    for index in (1, (slice(None), -1), (T([0, 2]), slice(1, 3)), (T([1, 0]), T([2, 2]))):
        for transpose in (False, True):
            got, want = get_both((3, 4, 3), dtype, index, transpose)
            assert_close(got, want)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "bool"])
def test_getitem_masks(dtype):
    t, k = make((3, 4), dtype)
    mt, mk = make((3, 4), "bool", seed=3)
    assert_close(k[mk], t[mt])
    assert_close(k.t()[mk.t()], t.t()[mt.t()])
    assert_close(k[mk[:, 0]], t[mt[:, 0]])
    assert_close(k[:, mk[0]], t[:, mt[0]])
    assert_close(k[mk[:, 0], 1:], t[mt[:, 0], 1:])
    t3, k3 = make((2, 3, 4), dtype)
    assert_close(k3[:, mk], t3[:, mt])
    assert_close(k3[mk[:2, :3], 0], t3[mt[:2, :3], 0])


def test_getitem_zero_size_and_0d():
    t, k = make((0, 3), "float32")
    empty = T([], dtype=torch.int64)
    for index in (slice(None), (slice(None), 1), (empty,), (Ellipsis, T([0, 2]))):
        assert_close(k[to_k(index)], t[index])
    t0, k0 = make((), "int64")
    for index in ((), Ellipsis, None, True, (None, None)):
        assert_close(k0[index], t0[index])


def test_basic_indexing_returns_views():
    _, k = make((3, 4), "float32")
    for view in (k[1], k[:, 2], k[1:, ::2], k[None, 0], k[...], k[to_kiln(T(1))]):
        assert view._storage_ptr() == k._storage_ptr()
    row = k[1]
    row.fill_(7.0)
    assert k.tolist()[1] == [7.0] * 4
    col = k[:, 2]
    col.fill_(-1.0)
    assert [r[2] for r in k.tolist()] == [-1.0] * 3
    assert k[to_kiln(T([0, 1]))]._storage_ptr() != k._storage_ptr()  # advanced: a copy


def test_getitem_errors():
    _, k = make((3, 4), "float32")
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        k[3]
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1 with size 4"):
        k[0, -5]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        k[0, 0, 0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        k[::-1]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        k[:, ::0]
    with pytest.raises(IndexError, match=r"only integers, slices .*\(got float\)"):
        k[1.0]
    with pytest.raises(IndexError, match=r"only integers.*\(got str\)"):
        k["a"]
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool"):
        k[to_kiln(T([1.0]))]
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for dimension 0 with size 3"):
        k[to_kiln(T([0, 3]))]
    with pytest.raises(IndexError, match=r"index -5 is out of bounds for dimension 1 with size 4"):
        k[[0, 1], [1, -5]]
    with pytest.raises(IndexError, match=r"shape mismatch: .*\[2\], \[3\]"):
        k[to_kiln(T([0, 1])), to_kiln(T([0, 1, 2]))]
    with pytest.raises(IndexError, match=r"The shape of the mask \[2\] at index 0 does not match"):
        k[to_kiln(T([True, False]))]
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        k[0, 0][0]
    with pytest.raises(IndexError, match="single ellipsis"):
        k[..., ...]


# ---- __setitem__ ---------------------------------------------------------------------------------

SET_CASES = [
    (0, 5),
    (-1, 2.5),
    ((slice(None), 1), -3),
    ((slice(1, None), slice(None, None, 2)), 1),
    (Ellipsis, 0),
    ((None, 0), 4),
    (T([0, 2]), 9),
    ((T([0, 2]), T([1, 3])), 7),
    ((T([1]), slice(None), T([0, 2])), 6),
    ([0, 1], 1),
    (True, 3),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
@pytest.mark.parametrize("index,value", SET_CASES, ids=repr)
def test_setitem_scalar(dtype, index, value):
    t, k = make((3, 4, 5), dtype)
    if dtype == "bool":
        value = bool(value)
    elif dtype == "int32":
        value = int(value)
    t[index] = value
    before = k._version
    k[to_k(index)] = value
    assert k._version > before
    assert_close(k, t)


@pytest.mark.parametrize("index,shape", [
    (0, (4, 5)),
    (0, (5,)),
    (0, (1, 1, 5)),  # leading 1s are dropped
    ((slice(None), 1), (3, 1)),
    ((slice(0, 2),), (2, 4, 5)),
    (T([0, 2]), (2, 4, 5)),
    (T([0, 2]), (4, 1)),
    ((T([0, 2]), T([1, 3])), (2, 5)),
    ((T([0, 2]), T([1, 3])), (1, 2, 5)),
    ((T([1]), slice(None), T([0, 2])), (1, 4)),
    ((Ellipsis, T([0, 4])), (3, 4, 2)),
], ids=repr)
def test_setitem_tensor(index, shape):
    t, k = make((3, 4, 5), "float32")
    vt, vk = make(shape, "float64", seed=1)
    t[index] = vt.float()  # torch casts only for basic indexing; kiln casts always
    k[to_k(index)] = vk
    assert_close(k, t)


def test_setitem_from_an_overlapping_view_broadcasts():
    t, k = make((3, 4), "float32")
    t[1, :] = t[1, 0]
    k[1, :] = k[1, 0]
    t[:, 2:] = t[:, :1]
    k[:, 2:] = k[:, :1]
    assert_close(k, t)


def test_setitem_masks_lists_and_layouts():
    t, k = make((3, 4), "float32")
    mt, mk = make((3, 4), "bool", seed=2)
    t[mt] = 0.5
    k[mk] = 0.5
    assert_close(k, t)
    t[mt[:, 0]] = T([1.0, 2.0, 3.0, 4.0])
    k[mk[:, 0]] = to_kiln(T([1.0, 2.0, 3.0, 4.0]))
    assert_close(k, t)
    t[1] = T([9, 8, 7, 6])  # torch has no list values; kiln reads them like NumPy
    k[1] = [9, 8, 7, 6]
    assert_close(k, t)
    t[:, [0, 2]] = T([[1.0], [2.0], [3.0]])
    k[:, [0, 2]] = [[1], [2], [3]]
    assert_close(k, t)
    vt, vk = make((4, 3), "float32", seed=4)
    tt, kk = t.t(), k.t()  # writes through a transposed view reach the base
    tt[1:, [0, 2]] = vt[1:, :2]
    kk[1:, [0, 2]] = vk[1:, :2]
    assert_close(k, t)
    t[mt] = t[0, 0]
    k[mk] = k[0, 0]
    assert_close(k, t)


def test_setitem_overlapping_value():
    t, k = make((4, 4), "int64")
    t[:, [0, 1]] = t[:, 1:3].clone()
    k[:, [0, 1]] = k[:, 1:3]
    assert_close(k, t)
    t[1:] = t[:-1].clone()
    k[1:] = k[:-1]
    assert_close(k, t)


def test_setitem_errors():
    _, k = make((3, 4), "float32")
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        k[0] = to_kiln(T([1.0, 2.0]))
    with pytest.raises(RuntimeError, match=r"value tensor of shape \[3\] cannot be broadcast"):
        k[[0, 1]] = to_kiln(T([1.0, 2.0, 3.0]))
    with pytest.raises(IndexError, match="out of bounds"):
        k[5] = 1.0
    with pytest.raises(IndexError, match="out of bounds"):
        k[[0, 5]] = 1.0
    with pytest.raises(TypeError, match="can't assign a object"):
        k[0] = object()


def test_contains():
    t, k = make((3, 4), "int64")
    for v in (t[1, 2].item(), 1000, t[0, 0].item() + 0.5):
        assert (v in k) == (v in t)
    assert (to_kiln(t[1]) in k) == (t[1] in t)
    assert 2.0 in kiln.from_numpy(np.array([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        "a" in k  # noqa: B015


@pytest.mark.parametrize("key", [10**20, (slice(None), -(2**70))])
def test_huge_python_int_index_is_an_index_error(key):
    x = kiln.zeros(3, 4)
    with pytest.raises(IndexError, match="does not fit in int64"):
        x[key]
