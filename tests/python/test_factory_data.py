"""kiln.tensor / as_tensor / asarray: tensors from Python data, NumPy and other tensors."""

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_close, make

import kiln

DATA = [
    3,
    2.5,
    True,
    [],
    [[], []],
    [1, 2, 3],
    [1.5, 2],
    [True, False],
    [True, 2],
    [True, 2.5],
    [[1, 2], [3, 4]],
    ((1, 2), (3, 4)),
    [(1.0, 2), [3, 4]],
    [[[1], [2]], [[3], [4]]],
    range(5),
    [np.float64(1.0)],
    [np.float32(1.0), 2],
    [np.int32(1), np.int16(2)],
    [np.int32(1), 2.5],
    [np.bool_(True)],
    np.float32(1.5),
    np.int64(3),
    np.bool_(True),
    [-(2**63), 2**63 - 1],
]


@pytest.mark.parametrize("data", DATA, ids=repr)
def test_tensor_infers_like_torch(data):
    assert_close(kiln.tensor(data), torch.tensor(data))


def same_as_torch(kiln_fn, torch_fn):
    """kiln_fn() equals torch_fn(), or both raise the same exception type."""
    try:
        expected = torch_fn()
    except (RuntimeError, TypeError, ValueError) as err:
        with pytest.raises(type(err)):
            kiln_fn()
        return
    assert_close(kiln_fn(), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "data", [[[1, 0], [2, 3]], [0.5, -1.25, 3.0], 7, [True, False], [-1, 255], [300]], ids=repr
)
def test_tensor_with_explicit_dtype(data, dtype):
    same_as_torch(
        lambda: kiln.tensor(data, dtype=getattr(kiln, dtype)),
        lambda: torch.tensor(data, dtype=getattr(torch, dtype)),
    )


@pytest.mark.parametrize(
    "data, dtype",
    [
        ([300], "uint8"),
        ([-256], "uint8"),
        ([-129], "int8"),
        ([2**40], "int32"),
        ([1e10], "int32"),
        ([float("nan")], "int64"),
        ([float("inf")], "int16"),
    ],
)
def test_tensor_overflow_is_an_error(data, dtype):
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.tensor(data, dtype=getattr(torch, dtype))
    with pytest.raises(RuntimeError, match=f"cannot be converted to type {dtype} without overflow"):
        kiln.tensor(data, dtype=getattr(kiln, dtype))


def test_tensor_from_tensors_and_arrays_in_lists():
    k = kiln.tensor([kiln.tensor(1, dtype=kiln.int8), 2])
    assert_close(k, torch.tensor([torch.tensor(1, dtype=torch.int8), 2]))
    k = kiln.tensor([kiln.tensor(1, dtype=kiln.int8), kiln.tensor(2.5, dtype=kiln.float16)])
    assert k.dtype == kiln.float16 and k.tolist() == [1.0, 2.5]
    arrays = [np.array([1, 2], dtype=np.int32), np.array([3, 4], dtype=np.int32)]
    with pytest.warns(UserWarning):
        ref = torch.tensor(arrays)
    assert_close(kiln.tensor(arrays), ref)
    rows = [kiln.arange(3), kiln.arange(3, 6)]
    assert kiln.tensor(rows).tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bfloat16"])
def test_tensor_from_numpy_copies(dtype):
    arr = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    k = kiln.tensor(arr)
    assert_close(k, torch.tensor(arr))
    arr[0, 0] = 2
    assert k.tolist()[0][0] == (False if dtype == "bool" else 0)


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(10.0)[::-1],
        np.arange(12).reshape(3, 4).T,
        np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2],
        np.arange(4, dtype=">f4"),
        np.zeros((2, 0)),
        np.array(5.0),
    ],
    ids=["negative-stride", "transposed", "sliced", "big-endian", "empty", "0-d"],
)
def test_tensor_from_unusual_numpy_arrays(arr):
    # torch.tensor rejects negative strides and foreign byte order: compare with a plain copy.
    native = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C")
    k = kiln.tensor(arr)
    assert_close(k, torch.tensor(native))
    assert k.is_contiguous()


def test_tensor_from_readonly_numpy():
    arr = np.arange(4.0)
    arr.flags.writeable = False
    assert kiln.tensor(arr).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_tensor_copies_kiln_tensors():
    t, k = make((2, 3), "float32")
    c = kiln.tensor(k)
    assert c.data_ptr() != k.data_ptr()
    assert_close(c, t)
    c2 = kiln.tensor(k.t(), dtype=kiln.float64)
    assert_close(c2, t.t().double())
    assert c2.is_contiguous()
    b = kiln.tensor(k.bfloat16())
    assert b.dtype == kiln.bfloat16


def test_tensor_requires_grad():
    assert kiln.tensor([1.0, 2.0], requires_grad=True).requires_grad
    assert not kiln.tensor([1.0]).requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.tensor([1, 2], requires_grad=True)


@pytest.mark.parametrize(
    "data, match",
    [
        ([[1, 2], [3]], "expected sequence of length 2 at dim 1 \\(got 1\\)"),
        ([[1, 2], 3], "expected a sequence of length 2 at dim 1"),
        ([1, [2, 3]], "expected a number at dim 1"),
        ([[[1, 2]], [[1, 2, 3]]], "length 2 at dim 2"),
        ([np.zeros(2), np.zeros(3)], "shape"),
    ],
)
def test_ragged_data_is_a_type_and_value_error(data, match):
    with pytest.raises(TypeError, match=match):
        kiln.tensor(data)
    with pytest.raises(ValueError, match=match):
        kiln.tensor(data)
    with pytest.raises((TypeError, ValueError)):
        torch.tensor(data)


@pytest.mark.parametrize("data", ["abc", ["a"], [1, "2"], b"xy"], ids=repr)
def test_strings_are_type_errors(data):
    with pytest.raises(TypeError, match="invalid data type"):
        kiln.tensor(data)


def test_other_bad_data():
    with pytest.raises(RuntimeError, match="Could not infer dtype of NoneType"):
        kiln.tensor([1, None])
    with pytest.raises(RuntimeError, match="Could not infer dtype of dict"):
        kiln.tensor({1: 2})
    with pytest.raises(TypeError, match="complex"):
        kiln.tensor([1 + 2j])
    with pytest.raises(ValueError, match="too large"):
        kiln.tensor([2**64])
    with pytest.raises(TypeError, match="complex128"):
        kiln.tensor(np.zeros(2, dtype=np.complex128))


def test_as_tensor_shares_when_possible():
    arr = np.arange(4.0)
    k = kiln.as_tensor(arr)
    arr[0] = 10.0
    assert k.tolist()[0] == 10.0
    assert kiln.as_tensor(arr, dtype=kiln.float32).dtype == kiln.float32
    _, t = make((3,), "float32")
    assert kiln.as_tensor(t) is t
    assert kiln.as_tensor(t, dtype=kiln.float32) is t
    assert_close(
        kiln.as_tensor(t, dtype=kiln.float64), torch.tensor(t.tolist(), dtype=torch.float64)
    )
    assert_close(
        kiln.as_tensor([1, 2], dtype=kiln.float16), torch.as_tensor([1, 2], dtype=torch.float16)
    )
    ro = np.arange(3)
    ro.flags.writeable = False
    assert kiln.as_tensor(ro).tolist() == [0, 1, 2]
    assert kiln.as_tensor(np.arange(5)[::-2]).tolist() == [4, 2, 0]
    with pytest.raises(RuntimeError, match="CUDA"):
        kiln.as_tensor([1], device="cuda")


def test_asarray_copy_semantics():
    arr = np.arange(4.0)
    shared = kiln.asarray(arr)
    arr[1] = 7.0
    assert shared.tolist()[1] == 7.0
    copied = kiln.asarray(arr, copy=True)
    arr[2] = 9.0
    assert copied.tolist()[2] == 2.0
    _, t = make((2,), "float32")
    assert kiln.asarray(t) is t
    assert kiln.asarray(t, copy=True).data_ptr() != t.data_ptr()
    assert kiln.asarray(t, dtype=kiln.float64).dtype == kiln.float64
    with pytest.raises(ValueError, match="copy=False"):
        kiln.asarray(t, dtype=kiln.float64, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        kiln.asarray([1, 2], copy=False)
    assert_close(
        kiln.asarray([[1, 2]], dtype=kiln.float64), torch.asarray([[1, 2]], dtype=torch.float64)
    )
    assert_close(kiln.asarray(3), torch.asarray(3))
    src = torch.arange(4.0)
    view = kiln.asarray(src)
    src[0] = 5.0
    assert view.tolist()[0] == 5.0
    assert kiln.asarray([1.0], requires_grad=True).requires_grad
