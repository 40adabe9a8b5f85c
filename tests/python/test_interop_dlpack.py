"""DLPack interop: zero-copy exchange with NumPy and torch, strides, dtypes, capsule rules."""

import ctypes
import gc
import sys

import numpy as np
import pytest
import torch
from conftest import DTYPES, make

import kiln

NUMPY_DTYPES = [d for d in DTYPES if d != "bfloat16"]

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


def capsule_name(cap):
    return _get_name(cap).decode()


# ---- NumPy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_imports_kiln_zero_copy(dtype):
    t, k = make((3, 4), dtype)
    arr = np.from_dlpack(k)
    assert arr.dtype == np.dtype(dtype) and arr.shape == (3, 4)
    np.testing.assert_array_equal(arr, t.numpy())
    arr[1, 2] = 1
    assert k.tolist()[1][2] == (True if dtype == "bool" else 1)
    k.fill_(0)
    assert not arr.any()


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_kiln_imports_numpy_zero_copy(dtype):
    arr = (np.arange(12).reshape(3, 4) % 2).astype(dtype)
    k = kiln.from_dlpack(arr)
    assert k.dtype.name == dtype and k.shape == (3, 4)
    assert k.tolist() == arr.tolist()
    k.fill_(1)
    assert np.all(arr == 1)
    arr[0, 0] = 0
    assert k.tolist()[0][0] == (False if dtype == "bool" else 0)


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a.T,
        lambda a: a[:, 1::2],
        lambda a: a[1:, 2:],
        lambda a: a[None, :, 0],
        lambda a: a[:0],
    ],
    ids=["transposed", "strided", "offset", "unsqueezed", "empty"],
)
def test_numpy_views_keep_strides(view):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    arr = view(base)
    k = kiln.from_dlpack(arr)
    assert k.shape == arr.shape
    assert k.tolist() == arr.tolist()
    if arr.size:
        assert k.stride() == tuple(s // 4 for s in arr.strides)
        assert k.data_ptr() == arr.ctypes.data
    back = np.from_dlpack(k)
    np.testing.assert_array_equal(back, arr)
    if arr.size:
        assert np.shares_memory(back, base)


def test_numpy_kiln_views_round_trip():
    k = kiln.arange(12.0).reshape(3, 4)
    for v in (k.t(), k.narrow(1, 1, 2), k.select(1, 2)):
        arr = np.from_dlpack(v)
        assert arr.tolist() == v.tolist()
        assert arr.strides == tuple(s * 4 for s in v.stride())


def test_numpy_0d_and_keepalive():
    arr = np.array(3.5)
    k = kiln.from_dlpack(arr)
    assert k.shape == () and k.item() == 3.5
    src = np.arange(5.0)
    k = kiln.from_dlpack(src)
    del src
    gc.collect()
    assert k.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_negative_strides_are_rejected():
    with pytest.raises(ValueError, match="negative strides"):
        kiln.from_dlpack(np.arange(5.0)[::-1])


# ---- torch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_imports_kiln_zero_copy(dtype):
    t, k = make((2, 5), dtype)
    tt = torch.from_dlpack(k)
    assert tt.dtype == t.dtype and tuple(tt.shape) == (2, 5)
    assert torch.equal(tt, t)
    tt[0, 0] = 1
    assert k.tolist()[0][0] == t.new_ones(()).item()
    k.fill_(0)
    assert not tt.any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_kiln_imports_torch_zero_copy(dtype):
    t, _ = make((3, 4), dtype)
    for view in (t, t.t(), t[:, 1::2], t[1:]):
        k = kiln.from_dlpack(view)
        assert k.dtype.name == dtype and tuple(k.shape) == tuple(view.shape)
        assert k.stride() == view.stride() and k.data_ptr() == view.data_ptr()
        assert k.tolist() == view.tolist()
    k = kiln.from_dlpack(t)
    k.fill_(0)
    assert not t.any()


def test_kiln_views_export_with_strides_to_torch():
    k = kiln.arange(24.0).reshape(2, 3, 4)
    for v in (
        k.permute(2, 0, 1),
        k.narrow(2, 1, 2),
        k.select(0, 1),
        k.unsqueeze(1).expand(2, 5, 3, 4),
    ):
        tt = torch.from_dlpack(v)
        assert tt.stride() == v.stride() and tt.data_ptr() == v.data_ptr()
        assert tt.tolist() == v.tolist()


def test_unsupported_dtypes_are_clear_errors():
    with pytest.raises(TypeError, match="unsupported DLPack dtype"):
        kiln.from_dlpack(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="unsupported DLPack dtype"):
        kiln.from_dlpack(torch.zeros(2, dtype=torch.uint16))
    with pytest.raises(TypeError, match="__dlpack__"):
        kiln.from_dlpack([1, 2])


# ---- capsules ----------------------------------------------------------------------------------


def test_tensor_dlpack_protocol():
    k = kiln.ones(3)
    assert tuple(k.__dlpack_device__()) == (1, 0)
    cap = k.__dlpack__()
    assert capsule_name(cap) == "dltensor"
    v = k.__dlpack__(max_version=(1, 0))
    assert capsule_name(v) == "dltensor_versioned"
    k2 = kiln.from_dlpack(cap)
    assert capsule_name(cap) == "used_dltensor"
    assert k2.data_ptr() == k.data_ptr()
    with pytest.raises(ValueError, match="already consumed"):
        kiln.from_dlpack(cap)
    k3 = kiln.from_dlpack(v)
    assert capsule_name(v) == "used_dltensor_versioned" and k3.tolist() == [1.0, 1.0, 1.0]
    copied = kiln.from_dlpack(k.__dlpack__(copy=True))
    assert copied.data_ptr() != k.data_ptr() and copied.tolist() == k.tolist()
    assert kiln.from_dlpack(k.__dlpack__(stream=None, dl_device=(1, 0))).data_ptr() == k.data_ptr()
    with pytest.raises(BufferError):
        k.__dlpack__(dl_device=(2, 0))
    with pytest.raises(TypeError, match="stream"):
        k.__dlpack__(stream="s")


def test_export_requires_detached_tensor():
    k = kiln.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="require gradient"):
        k.__dlpack__()
    assert kiln.from_dlpack(k.detach()).tolist() == [1.0, 1.0]


def test_torch_capsules_are_consumed_once():
    t = torch.arange(4.0)
    cap = torch.utils.dlpack.to_dlpack(t)
    k = kiln.from_dlpack(cap)
    assert capsule_name(cap) == "used_dltensor"
    k.fill_(2)
    assert t.tolist() == [2.0] * 4
    with pytest.raises(ValueError, match="already consumed"):
        kiln.from_dlpack(cap)


def test_kiln_capsule_releases_its_tensor_when_unused_or_consumed():
    arr = np.zeros(3)
    base = sys.getrefcount(arr)
    k = kiln.from_numpy(arr)
    cap = k.__dlpack__()
    del k
    assert sys.getrefcount(arr) > base
    del cap  # never consumed: the capsule destructor runs the deleter
    gc.collect()
    assert sys.getrefcount(arr) == base
    k = kiln.from_numpy(arr)
    cap = k.__dlpack__()
    del k
    tt = torch.utils.dlpack.from_dlpack(cap)
    del cap
    assert sys.getrefcount(arr) > base  # torch now owns it
    del tt
    gc.collect()
    assert sys.getrefcount(arr) == base


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _foreign_capsule(code=2, bits=32, strides=None, byte_offset=0, device=1):
    """A hand-made DLPack producer (like a C library would be) that counts deleter calls."""
    state = {"deleted": 0}
    buf = (ctypes.c_float * 8)(*range(8))
    shape = (ctypes.c_int64 * 2)(2, 3)
    managed = _DLManagedTensor()
    managed.dl_tensor.data = ctypes.addressof(buf)
    managed.dl_tensor.device = _DLDevice(device, 0)
    managed.dl_tensor.ndim = 2
    managed.dl_tensor.dtype = _DLDataType(code, bits, 1)
    managed.dl_tensor.shape = shape
    if strides is not None:
        state["strides"] = (ctypes.c_int64 * 2)(*strides)
        managed.dl_tensor.strides = state["strides"]
    managed.dl_tensor.byte_offset = byte_offset

    def on_delete(_ptr):
        state["deleted"] += 1

    managed.deleter = _DELETER(on_delete)
    state.update(buf=buf, shape=shape, managed=managed, cb=managed.deleter)
    return _capsule_new(ctypes.addressof(managed), b"dltensor", None), state


def test_foreign_deleter_is_called_exactly_once():
    cap, state = _foreign_capsule()
    k = kiln.from_dlpack(cap)
    assert capsule_name(cap) == "used_dltensor"
    assert k.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    view = k.t()
    del k, cap
    gc.collect()
    assert state["deleted"] == 0  # a view still uses the memory
    assert view.tolist()[2] == [2.0, 5.0]
    del view
    gc.collect()
    assert state["deleted"] == 1


def test_foreign_strides_and_byte_offset():
    cap, state = _foreign_capsule(strides=(1, 2), byte_offset=8)
    k = kiln.from_dlpack(cap)
    assert k.stride() == (1, 2)
    assert k.tolist() == [[2.0, 4.0, 6.0], [3.0, 5.0, 7.0]]
    del k
    gc.collect()
    assert state["deleted"] == 1


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"code": 5, "bits": 64}, TypeError, "unsupported DLPack dtype"),
        ({"device": 2}, RuntimeError, "CPU only"),
        ({"strides": (-1, 2)}, ValueError, "negative strides"),
    ],
)
def test_rejected_capsules_are_not_consumed(kwargs, exc, match):
    cap, state = _foreign_capsule(**kwargs)
    with pytest.raises(exc, match=match):
        kiln.from_dlpack(cap)
    assert capsule_name(cap) == "dltensor"
    assert state["deleted"] == 0
