"""Python-level parts of kiln.Tensor: the pieces that are plain glue over the C++ methods.

kiln.Tensor is the C++ class `kiln._C.Tensor`; this module adds methods whose work is argument
parsing (``size()``, ``to()``, ``tolist()``) so every op still runs in C++.
"""

from __future__ import annotations

import threading

from kiln import _C

Tensor = _C.Tensor
dtype = _C.dtype


class Size(tuple):
    """kiln.Size: the shape of a tensor, a tuple of ints (like torch.Size)."""

    def __repr__(self) -> str:
        return f"kiln.Size([{', '.join(str(s) for s in self)}])"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n


class device:  # noqa: N801 - torch spelling
    """kiln.device('cpu') / kiln.device('cuda', 0)."""

    __slots__ = ("type", "index")

    def __init__(self, type_or_str, index=None):
        if isinstance(type_or_str, device):
            self.type, self.index = type_or_str.type, type_or_str.index
            return
        s = str(type_or_str)
        if ":" in s:
            s, idx = s.split(":", 1)
            index = int(idx)
        if s not in ("cpu", "cuda"):
            raise RuntimeError(
                f"Expected one of cpu, cuda device type at start of device string: {s}"
            )
        self.type, self.index = s, index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        idx = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{idx})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index or 0) == (
            other.type,
            other.index or 0,
        )

    def __hash__(self) -> int:
        return hash((self.type, self.index or 0))

    def __enter__(self):
        """`with kiln.device("cuda"):` factories without device= make tensors here (this
        thread, until the block ends; blocks nest)."""
        _blocks.__dict__.setdefault("saved", []).append(_C._set_block_device(str(self)))
        return self

    def __exit__(self, *exc):
        _C._set_block_device(_blocks.saved.pop())
        return False


_blocks = threading.local()


def set_default_device(dev) -> None:
    """torch.set_default_device: where factories without device= make tensors (None: the CPU);
    a `with kiln.device(...)` block overrides it in its thread."""
    _C._set_default_device(None if dev is None else str(device(dev)))


def get_default_device() -> device:
    return device(_C._default_device())


class _DefaultDevice:
    """What compiled code is guarded on: the device factories without device= use."""

    @property
    def name(self) -> str:
        return _C._default_device()


default_device_state = _DefaultDevice()


def _size(self, dim=None):
    if dim is None:
        return Size(self._sizes)
    return self._size_dim(dim)


def _parse_to(args, kwargs):
    dt, dev = kwargs.get("dtype"), kwargs.get("device")
    for a in args:
        if isinstance(a, dtype):
            dt = a
        elif isinstance(a, Tensor):
            dt = a.dtype
        elif isinstance(a, (str, device)):
            dev = a
        elif a is None:
            continue
        else:
            raise TypeError(f"to(): unexpected argument {a!r}")
    return dt, dev


def _to(self, *args, **kwargs):
    dt, dev = _parse_to(args, kwargs)
    copy = kwargs.get("copy", False)
    target = None if dev is None else _device_string(dev)
    moves = target is not None and target != self._device_str
    t = self
    if dt is not None and dt != self.dtype or (copy and not moves):
        t = t._to_dtype(dt if dt is not None else self.dtype, copy)
    if moves:
        t = t._to_device(target)
    fmt = kwargs.get("memory_format")
    if fmt is not None:
        from kiln._factory import preserve_format

        if fmt is not preserve_format:
            t = t.contiguous(memory_format=fmt)
    return t


def _is_contiguous(self, memory_format=None) -> bool:
    if memory_format is None:
        return self._is_contiguous()
    from kiln._factory import _is_contiguous_as

    return _is_contiguous_as(self, memory_format)


def _device_string(dev) -> str:
    """'cpu' or 'cuda:N' for a device argument; raises when CUDA is asked for but unusable."""
    d = device(dev) if not isinstance(dev, int) else device("cuda", dev)
    if d.type == "cpu":
        return "cpu"
    from kiln import cuda

    return f"cuda:{cuda._index(d)}"


def _cuda(self, device=None, non_blocking=False, memory_format=None):
    target = _device_string("cuda" if device is None else device)
    if not target.startswith("cuda"):
        raise ValueError(f"Invalid device, must be cuda device: {device}")
    return self if target == self._device_str else self._to_device(target)


def _cpu(self, memory_format=None):
    return self if self._device_str == "cpu" else self._to_device("cpu")


def _tolist(self):
    if self.dim() == 0:
        return self.item()
    if self.dtype == _C.dtype.bfloat16:
        return self.float().numpy(force=True).tolist()
    return self.numpy(force=True).tolist()


def _repr(self) -> str:
    import numpy as np

    host = self.cpu()
    arr = (host.float() if self.dtype == _C.dtype.bfloat16 else host).numpy(force=True)
    # torch prints floats with 4 fixed decimals unless every value is integral ("1.").
    fixed = arr.dtype.kind == "f" and not np.all(
        np.isnan(arr) | np.isinf(arr) | (arr == np.round(arr))
    )
    body = np.array2string(
        arr,
        separator=", ",
        prefix="tensor(",
        precision=4,
        floatmode="fixed" if fixed else "maxprec",
    )
    extra = "" if self._device_str == "cpu" else f", device='{self._device_str}'"
    if self.dtype not in (_C.dtype.float32, _C.dtype.int64, _C.dtype.bool):
        extra = f", dtype={self.dtype}"
    if self.grad_fn is not None:
        extra += f", grad_fn=<{self.grad_fn.name()}>"
    elif self.requires_grad:
        extra += ", requires_grad=True"
    return f"tensor({body}{extra})"


def _cast(dt):
    def method(self, memory_format=None):
        return self._to_dtype(dt)

    return method


def _len(self) -> int:
    if self.dim() == 0:
        raise TypeError("len() of a 0-d tensor")
    return self._size_dim(0)


def _iter(self):
    if self.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(self.unbind(0))


def _bool(self) -> bool:
    if self.numel() != 1:
        raise RuntimeError(f"Boolean value of Tensor with {self.numel()} values is ambiguous")
    return bool(self.item())


def _index(self) -> int:
    if self.numel() != 1 or self.dtype.is_floating_point:
        raise TypeError("only integer tensors of a single element can be converted to an index")
    return int(self.item())


def _format(self, spec: str) -> str:
    """f"{loss:.4f}" formats a zero-dim tensor's value, as torch does; other tensors take only
    the empty spec (their repr)."""
    if self.dim() == 0:
        return format(self.item(), spec)
    return object.__format__(self, spec)


def _install() -> None:
    t = Tensor
    t.size = _size
    t.shape = property(lambda self: Size(self._sizes))
    t.device = property(lambda self: device(self._device_str))
    t.is_cpu = property(lambda self: self._device_str == "cpu")
    t.to = _to
    t._is_contiguous = t.is_contiguous
    t.is_contiguous = _is_contiguous
    t.cuda = _cuda
    t.type_as = lambda self, other: self._to_dtype(other.dtype)
    t.tolist = _tolist
    t.__repr__ = _repr
    t.__str__ = _repr
    t.__len__ = _len
    t.__iter__ = _iter
    t.__bool__ = _bool
    t.__index__ = _index
    t.__int__ = lambda self: int(self.item())
    t.__float__ = lambda self: float(self.item())
    t.__format__ = _format
    t.__hash__ = lambda self: id(self)
    t.__array__ = lambda self, dtype=None, copy=None: (
        self.numpy() if dtype is None else self.numpy().astype(dtype)
    )
    # As torch's: NumPy scalars and arrays defer to the tensor's reflected operators, so
    # `np.float64(2) * t` is a tensor (NumPy would otherwise convert t and return an ndarray).
    t.__array_priority__ = 1000
    t.cpu = _cpu
    t.float = _cast(_C.dtype.float32)
    t.double = _cast(_C.dtype.float64)
    t.half = _cast(_C.dtype.float16)
    t.bfloat16 = _cast(_C.dtype.bfloat16)
    t.long = _cast(_C.dtype.int64)
    t.int = _cast(_C.dtype.int32)
    t.short = _cast(_C.dtype.int16)
    t.char = _cast(_C.dtype.int8)
    t.byte = _cast(_C.dtype.uint8)
    t.bool = _cast(_C.dtype.bool)
    t.is_floating_point = lambda self: self.dtype.is_floating_point
    t.requires_grad_ = _requires_grad_
    t.__deepcopy__ = _deepcopy
    t.__reduce_ex__ = _reduce_ex
    t.data = property(_get_data, _set_data)


def _get_data(self):
    """``t.data``: the same storage without autograd history (torch's detached alias)."""
    return self.detach()


def _set_data(self, value):
    """``t.data = other``: t now views other's storage, keeping its own autograd identity."""
    if not isinstance(value, _C.Tensor):
        raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
    self._replace_data(value)


# The same-size integer dtype each dtype's bits travel as when a tensor is pickled.
_BITS_AS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _deepcopy(self, memo):
    """copy.deepcopy of a tensor: a detached copy with the same requires_grad (and a copy of
    its .grad), as torch gives for graph leaves; copying a non-leaf is torch's error."""
    if id(self) in memo:
        return memo[id(self)]
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                           "the deepcopy protocol at the moment.")
    new = self.detach().clone()
    new.requires_grad_(self.requires_grad)
    memo[id(self)] = new
    if self.grad is not None:
        new.grad = _deepcopy(self.grad, memo)
    return new


def _reduce_ex(self, protocol):
    """Pickles the tensor's values (as the bits of a same-size integer dtype, so bfloat16
    travels too), dtype, shape, device and requires_grad; views and shared storage are not
    kept, each tensor unpickles as its own copy (a leaf, as torch's)."""
    flat = self.detach().cpu().contiguous().reshape(-1)
    bits = flat.view(getattr(_C.dtype, _BITS_AS[self.itemsize])).numpy()
    return (_rebuild, (bits, self.dtype.name, tuple(self.shape), self._device_str,
                       self.requires_grad))


def _rebuild(bits, dtype, shape, device_str, requires_grad):
    t = _C.from_numpy(bits.copy()).view(getattr(_C.dtype, dtype)).reshape(shape)
    if device_str != "cpu":
        t = t.to(device_str)
    return t.requires_grad_(requires_grad)


def _requires_grad_(self, requires_grad=True):
    self.requires_grad = requires_grad
    return self


_install()
