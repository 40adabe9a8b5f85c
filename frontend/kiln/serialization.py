"""kiln.save and kiln.load in torch's checkpoint format, both ways.

A file is what torch.save writes: a zip archive with `archive/data.pkl` (the object, pickled
with each tensor as a call of `torch._utils._rebuild_tensor_v2` on a storage named by a
persistent id) and one `archive/data/<key>` entry per storage. So torch.load reads kiln's
checkpoints (also with weights_only=True) and kiln.load reads torch's, with no torch import:
the torch names in the pickle are written and resolved by name. Tensors that are the same
object, or views with the same memory, dtype and layout, are stored once and come back as one
tensor (tied weights stay tied). A path is written atomically (a temporary file renamed over
it), so an interrupted save never leaves a truncated checkpoint.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import tempfile
import zipfile

import numpy as np

import kiln

__all__ = ["load", "save"]

# torch's storage class of each dtype (the names its pickles use), and back.
_STORAGE = {
    kiln.float32: "FloatStorage", kiln.float64: "DoubleStorage", kiln.float16: "HalfStorage",
    kiln.bfloat16: "BFloat16Storage", kiln.int64: "LongStorage", kiln.int32: "IntStorage",
    kiln.int16: "ShortStorage", kiln.int8: "CharStorage", kiln.uint8: "ByteStorage",
    kiln.bool: "BoolStorage",
}  # fmt: skip
_DTYPE_OF_STORAGE = {name: dt for dt, name in _STORAGE.items()}
_NUMPY = {
    kiln.float32: np.float32, kiln.float64: np.float64, kiln.float16: np.float16,
    kiln.bfloat16: np.int16, kiln.int64: np.int64, kiln.int32: np.int32, kiln.int16: np.int16,
    kiln.int8: np.int8, kiln.uint8: np.uint8, kiln.bool: np.bool_,
}  # fmt: skip


class _Global:
    """A reference to a global of another library (`torch._utils._rebuild_tensor_v2`), written
    into the pickle by name; nothing is imported."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name


_REBUILD_TENSOR = _Global("torch._utils", "_rebuild_tensor_v2")
_REBUILD_PARAMETER = _Global("torch._utils", "_rebuild_parameter")
_ORDERED_DICT = collections.OrderedDict


class _StorageRef:
    def __init__(self, key: str, dtype, numel: int):
        self.key, self.dtype, self.numel = key, dtype, numel


class _Pickler(pickle._Pickler):  # the Python pickler: its save_global can be extended
    def __init__(self, file, protocol):
        super().__init__(file, protocol)
        self.storages: dict = {}  # key -> contiguous bytes
        self._keys: dict = {}  # (address, dtype, shape, strides) -> key
        # Every tensor whose address is a key stays alive until the dump ends: a freed copy's
        # address could be reused by the next one, which would then be taken for it.
        self._alive: list = []
        self.dispatch = dict(self.dispatch)

    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            return ("storage", _Global("torch", _STORAGE[obj.dtype]), obj.key, "cpu", obj.numel)
        return None

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, _Global):
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
            return
        if isinstance(obj, kiln.Tensor):
            memo = self.memo.get(id(obj))
            if memo is not None:  # the same tensor object again: one object when loaded
                self.write(self.get(memo[0]))
                return
            self.save_reduce(*self._tensor_reduce(obj), obj=obj)
            return
        super().save(obj, save_persistent_id)

    def _tensor_reduce(self, t):
        if t.device.type != "cpu":
            t = t.cpu()
        ident = (t.data_ptr(), str(t.dtype), tuple(t.shape), tuple(t.stride()))
        self._alive.append(t)
        data = t.detach().contiguous()
        key = self._keys.get(ident)
        if key is None:
            key = self._keys[ident] = str(len(self.storages))
            view = data.view(kiln.int16) if data.dtype == kiln.bfloat16 else data
            self.storages[key] = view.numpy().tobytes()
        ref = _StorageRef(key, data.dtype, data.numel())
        shape = tuple(data.shape)
        strides, stride = [], 1
        for size in reversed(shape):  # the stored copy is contiguous
            strides.append(stride)
            stride *= size
        args = (ref, 0, shape, tuple(reversed(strides)), t.requires_grad, _ORDERED_DICT())
        if isinstance(t, kiln.nn.Parameter):
            return _REBUILD_PARAMETER, ((_REBUILD_TENSOR, args), t.requires_grad, _ORDERED_DICT())
        return _REBUILD_TENSOR, args

    def save_reduce(self, func, args, state=None, listitems=None, dictitems=None,
                    state_setter=None, *, obj=None):  # fmt: skip
        if isinstance(func, _Global):
            self.save(func)
            self.save(tuple(self._nested(a) for a in args))
            self.write(pickle.REDUCE)
            if obj is not None:
                self.memoize(obj)
            return
        super().save_reduce(func, args, state, listitems, dictitems, state_setter, obj=obj)

    def _nested(self, a):
        """A (rebuild, args) pair inside a Parameter's args is itself a call."""
        if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], _Global):
            return _Call(*a)
        return a


class _Call:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


def save(obj, f, pickle_module=pickle, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):  # fmt: skip
    """Writes `obj` (any picklable object holding kiln tensors) to a path or file object."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, pickle_protocol)
    pickler.dispatch_table = {}
    pickler.dump(obj)
    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".kiln-save-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                _write_archive(out, buffer.getvalue(), pickler.storages)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return
    _write_archive(f, buffer.getvalue(), pickler.storages)


def _write_archive(out, pickled: bytes, storages: dict) -> None:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/byteorder", "little")
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data)
        z.writestr("archive/version", "3\n")


# --- load -------------------------------------------------------------------------------------

_SAFE = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,  # MultiStepLR's milestones
    ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "slice"): slice,
    ("builtins", "complex"): complex, ("builtins", "bytearray"): bytearray,
    # dtypes and devices in a checkpoint (an AMP config, a saved `device`), torch's or kiln's
    ("torch", "device"): kiln.device, ("kiln._tensor", "device"): kiln.device,
    ("kiln._C", "dtype"): type(kiln.float32),
}  # fmt: skip
_DTYPE_NAMES = {name for name in dir(kiln) if isinstance(getattr(kiln, name), type(kiln.float32))}


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, *rest):
    t = storage.as_strided(tuple(size), tuple(stride), offset)
    if requires_grad:
        t = t.detach().requires_grad_(True)
    return t


def _rebuild_parameter(data, requires_grad, hooks=None, *rest):
    return kiln.nn.Parameter(data.detach(), requires_grad)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive, prefix, weights_only, map_location=None):
        super().__init__(file)
        self.archive, self.prefix, self.weights_only = archive, prefix, weights_only
        self.map_location = map_location
        self.loaded: dict = {}

    def find_class(self, module, name):
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in _DTYPE_OF_STORAGE:
            return _DTYPE_OF_STORAGE[name]
        if module == "torch" and name == "Size":
            return tuple
        if module == "torch" and name in _DTYPE_NAMES:
            return getattr(kiln, name)
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        if module.split(".")[0] == "torch":
            raise pickle.UnpicklingError(
                f"kiln.load: the file needs {module}.{name}, which kiln cannot rebuild (kiln "
                "reads tensors, parameters, containers and plain Python values)"
            )
        if self.weights_only:
            raise pickle.UnpicklingError(
                f"kiln.load: weights_only=True refuses the global {module}.{name}; pass "
                "weights_only=False if you trust this file"
            )
        return super().find_class(module, name)

    def persistent_load(self, pid):
        kind, dtype, key, location, numel = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"kiln.load: unknown persistent id {kind!r}")
        if key not in self.loaded:
            raw = self.archive.read(f"{self.prefix}/data/{key}")
            values = np.frombuffer(raw, dtype=_NUMPY[dtype], count=numel).copy()
            t = kiln.from_numpy(values)
            t = t.view(kiln.bfloat16) if dtype == kiln.bfloat16 else t
            self.loaded[key] = _placed(t, str(location), self.map_location)
        return self.loaded[key]


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):  # fmt: skip
    """Reads what kiln.save or torch.save wrote (a path or file object). weights_only (the
    default, as torch's) allows tensors, containers and plain values only."""
    weights_only = True if weights_only is None else weights_only
    try:
        archive = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError) as e:
        raise RuntimeError(
            f"kiln.load: {f!r} is not a checkpoint written by kiln.save or torch.save ({e})"
        ) from None
    with archive:
        names = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if not names:
            raise RuntimeError(f"kiln.load: {f!r} has no data.pkl (not a torch/kiln checkpoint)")
        prefix = names[0][: -len("/data.pkl")]
        try:
            with archive.open(names[0]) as pickled:
                obj = _Unpickler(pickled, archive, prefix, weights_only, map_location).load()
        except (pickle.UnpicklingError, KeyError, EOFError, ValueError, zipfile.BadZipFile) as e:
            raise RuntimeError(f"kiln.load: {f!r} could not be read: {e}") from e
    return obj


def _placed(t, location: str, map_location):
    """A loaded storage where torch.load's `map_location` puts it: a device for all, a dict
    from saved location to device (unlisted locations load where they were saved), or
    ``fn(storage, location)`` returning the storage to use (``lambda s, loc: s`` keeps it)."""
    if map_location is None:
        return t  # read on the host; kiln does not move it back to its saved device
    if callable(map_location):
        placed = map_location(t, location)
        return t if placed is None else placed
    if isinstance(map_location, dict):
        target = str(map_location.get(location, location))
    else:
        target = str(map_location)
    return t if target in ("cpu", "cpu:0") else t.to(target)
