"""Shape ops (cat, stack, split, repeat, flip, roll, tril, diagonal, broadcasting, ...) vs torch."""

import pytest
import torch
from conftest import DTYPES, assert_close, make, to_kiln

import kiln


def check(fn, *inputs):
    """Runs fn(module, *tensors) with torch and with kiln on the same values and compares."""
    tts = [t for t, _ in inputs]
    kts = [k for _, k in inputs]
    want = fn(torch, *tts)
    got = fn(kiln, *kts)
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_close(g, w)
    else:
        assert_close(got, want)


def transposed(shape, dtype, seed=0):
    """A non-contiguous pair: made with the last two dims swapped, then transposed back."""
    t, k = make(shape[:-2] + (shape[-1], shape[-2]), dtype, seed)
    return t.transpose(-1, -2), k.transpose(-1, -2)


# ---- cat / stack ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_dtypes_and_dims(dtype):
    a, b = make((2, 3), dtype, 0), make((2, 3), dtype, 1)
    for dim in (0, 1, -1, -2):
        check(lambda m, x, y, d=dim: m.cat([x, y], d), a, b)
    check(lambda m, x, y: m.cat((x, y), dim=1), a, transposed((2, 3), dtype))


def test_cat_aliases_and_promotion():
    a, b, c = make((2, 3), "int32"), make((1, 3), "float16"), make((2, 3), "bool")
    check(lambda m, x, y: m.cat([x, y]), a, b)
    check(lambda m, x, y: m.concat([x, y], dim=0), a, c)
    check(lambda m, x, y: m.concatenate([x, y], axis=0), b, c)


def test_cat_empty_rules():
    a, e1, e2 = make((2, 3), "float32"), make((0,), "float64"), make((0, 3), "float32")
    check(lambda m, x, y: m.cat([y, x]), a, e1)
    check(lambda m, x, y: m.cat([x, y, x]), a, e2)
    check(lambda m, x: m.cat([x, x]), e1)
    check(lambda m, x: m.cat([x], 1), make((2, 0), "int64"))


def test_cat_errors():
    _, a = make((2, 3), "float32")
    _, b = make((2, 4), "float32")
    with pytest.raises(RuntimeError, match=r"Sizes of tensors must match except in dimension 0"):
        kiln.cat([a, b])
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        kiln.cat([a, a[0]])
    with pytest.raises(RuntimeError, match="zero-dimensional tensor"):
        kiln.cat([a[0, 0], a[0, 0]])
    with pytest.raises(ValueError, match="non-empty list"):
        kiln.cat([])
    with pytest.raises(IndexError, match="dimension out of range"):
        kiln.cat([a, a], 2)
    with pytest.raises(TypeError, match="Tensors"):
        kiln.cat([a, 1])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool"])
def test_stack(dtype):
    a, b = make((2, 3), dtype, 0), make((2, 3), dtype, 1)
    for dim in (0, 1, 2, -1, -3):
        check(lambda m, x, y, d=dim: m.stack([x, y], d), a, b)
    check(lambda m, x, y: m.stack((x, y), dim=1), a, transposed((2, 3), dtype))
    check(lambda m, x: m.stack([x, x]), make((), dtype))
    check(lambda m, x: m.stack([x]), make((0, 2), dtype))


def test_stack_errors():
    _, a = make((2, 3), "float32")
    _, b = make((3, 2), "float32")
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size.*\[3, 2\]"):
        kiln.stack([a, b])
    with pytest.raises(IndexError):
        kiln.stack([a, a], 3)


@pytest.mark.parametrize("name", ["hstack", "vstack", "dstack"])
def test_hvd_stack(name):
    for shape in ((3,), (2, 3), (2, 3, 2), ()):
        a, b = make(shape, "float32", 0), make(shape, "float32", 1)
        check(lambda m, x, y: getattr(m, name)([x, y]), a, b)


@pytest.mark.parametrize("name", ["atleast_1d", "atleast_2d", "atleast_3d"])
def test_atleast(name):
    for shape in ((), (3,), (2, 3), (2, 3, 2)):
        a = make(shape, "int32")
        check(lambda m, x: getattr(m, name)(x), a)
    check(lambda m, x, y: getattr(m, name)(x, y), make((), "int32"), make((3,), "int32"))


# ---- split family --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "bool"])
def test_split_chunk_tensor_split(dtype):
    a = make((7, 4), dtype)
    for size in (1, 2, 3, 7, 10):
        check(lambda m, x, s=size: m.split(x, s), a)
        check(lambda m, x, s=size: x.split(s, dim=0), a)
    check(lambda m, x: m.split(x, [1, 3], dim=1), a)
    check(lambda m, x: x.split([2, 0, 5]), a)
    check(lambda m, x: x.split_with_sizes([3, 4]), a)
    for chunks in (1, 2, 3, 4, 9):
        check(lambda m, x, c=chunks: m.chunk(x, c), a)
        check(lambda m, x, c=chunks: x.chunk(c, -1), a)
    for arg in (1, 3, 5, 9, [2, 5], [1, 1, 6], [0], [-2]):
        check(lambda m, x, s=arg: m.tensor_split(x, s), a)
    for idx in (torch.tensor([1, 4]), torch.tensor(3)):
        got, want = kiln.tensor_split(a[1], to_kiln(idx)), torch.tensor_split(a[0], idx)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_close(g, w)
    check(lambda m, x: x.tensor_split(3, dim=1), a)
    check(lambda m, x: m.split(x, 2, dim=1), transposed((7, 4), dtype))
    check(lambda m, x: m.chunk(x, 3), make((0, 2), dtype))
    check(lambda m, x: m.split(x, 0), make((0, 2), dtype))
    check(lambda m, x: m.unbind(x, 1), a)


def test_split_returns_views():
    _, a = make((6,), "float32")
    parts = a.split(2)
    parts[1].fill_(5.0)
    assert a.tolist()[2:4] == [5.0, 5.0]
    assert kiln.chunk(a, 3)[0]._storage_ptr() == a._storage_ptr()


def test_split_errors():
    _, a = make((3,), "float32")
    with pytest.raises(RuntimeError, match=r"split_size can only be 0"):
        a.split(0)
    with pytest.raises(RuntimeError, match=r"sum exactly to 3.*\[1, 1\]"):
        kiln.split(a, [1, 1])
    with pytest.raises(RuntimeError, match="non-negative"):
        a.split(-1)
    with pytest.raises(RuntimeError, match="greater than 0"):
        kiln.chunk(a, 0)
    with pytest.raises(RuntimeError, match="larger than 0"):
        kiln.tensor_split(a, 0)
    with pytest.raises(RuntimeError, match="1-dimensional"):
        kiln.split(a[0], 1)


# ---- repeat / tile / repeat_interleave -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeat_tile(dtype):
    a = make((2, 3), dtype)
    for reps in ((1, 1), (2, 3), (2, 1, 2), (0, 2), (3, 1, 1, 1)):
        check(lambda m, x, r=reps: x.repeat(*r), a)
    check(lambda m, x: x.repeat((2, 2)), transposed((2, 3), dtype))
    check(lambda m, x: x.repeat(3), make((), dtype))
    for reps in ((2,), (2, 2), (1, 2, 2)):
        check(lambda m, x, r=reps: m.tile(x, r), a)
        check(lambda m, x, r=reps: x.tile(*r), a)
    check(lambda m, x: x.repeat(2, 2), make((0, 3), dtype))


def test_repeat_errors():
    _, a = make((2, 3), "float32")
    with pytest.raises(RuntimeError, match="can not be smaller"):
        a.repeat(2)
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        a.repeat(-1, 2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int16", "bool"])
def test_repeat_interleave(dtype):
    a = make((2, 3), dtype)
    check(lambda m, x: m.repeat_interleave(x, 2), a)
    check(lambda m, x: x.repeat_interleave(3, dim=1), a)
    check(lambda m, x: m.repeat_interleave(x, 2, dim=-2), transposed((2, 3), dtype))
    check(lambda m, x: m.repeat_interleave(x, 0, dim=0), a)
    check(lambda m, x: m.repeat_interleave(x, 4), make((), dtype))
    rt, rk = torch.tensor([1, 0, 2]), to_kiln(torch.tensor([1, 0, 2]))
    at, ak = a
    assert_close(kiln.repeat_interleave(ak, rk, dim=1), torch.repeat_interleave(at, rt, dim=1))
    assert_close(ak.repeat_interleave(rk[2:], dim=0), at.repeat_interleave(rt[2:], dim=0))


def test_repeat_interleave_counts_and_errors():
    for dt in (torch.int64, torch.int32):
        rt = torch.tensor([2, 0, 3], dtype=dt)
        assert_close(kiln.repeat_interleave(to_kiln(rt)), torch.repeat_interleave(rt))
    _, a = make((3,), "float32")
    with pytest.raises(RuntimeError, match="non-negative"):
        kiln.repeat_interleave(a, -1)
    with pytest.raises(RuntimeError, match=r"repeats.size\(0\) = 2 and input.size\(0\) = 3"):
        kiln.repeat_interleave(a, to_kiln(torch.tensor([1, 2])))
    with pytest.raises(RuntimeError, match="Long or Int"):
        kiln.repeat_interleave(to_kiln(torch.tensor([1.0, 2.0])))


# ---- flip / roll / movedim -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip(dtype):
    a = make((2, 3, 4), dtype)
    for dims in ((0,), (1,), (2,), (0, 2), (-1, 0, 1), ()):
        check(lambda m, x, d=dims: m.flip(x, d), a)
    check(lambda m, x: x.flip(0, 1), transposed((3, 4), dtype))
    check(lambda m, x: x.flip(dims=[1]), a)
    check(lambda m, x: m.fliplr(x), a)
    check(lambda m, x: m.flipud(x), make((3,), dtype))
    check(lambda m, x: x.flip(0), make((), dtype))
    check(lambda m, x: x.flip(0), make((0, 2), dtype))


def test_flip_errors():
    _, a = make((2, 3), "float32")
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
        a.flip(0, 0)
    with pytest.raises(IndexError, match="out of range"):
        a.flip(2)
    with pytest.raises(RuntimeError, match=">= 2-d"):
        kiln.fliplr(a[0])


@pytest.mark.parametrize("dtype", ["float64", "float16", "uint8", "bool"])
def test_roll(dtype):
    a = make((3, 4), dtype)
    for shifts, dims in ((1, 0), (-1, 1), (5, -1), ((1, 2), (0, 1)), (7, None), (-3, None)):
        check(lambda m, x, s=shifts, d=dims: m.roll(x, s, d), a)
    check(lambda m, x: x.roll(1, 0), transposed((3, 4), dtype))
    check(lambda m, x: x.roll(shifts=2), make((0, 3), dtype))
    check(lambda m, x: m.roll(x, 1), make((), dtype))


def test_roll_errors():
    _, a = make((2, 3), "float32")
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        kiln.roll(a, (1, 2), (0,))
    with pytest.raises(RuntimeError, match="must align"):
        kiln.roll(a, (1, 2))


def test_movedim():
    a = make((2, 3, 4, 5), "float32")
    for src, dst in ((0, -1), ((0, 1), (2, 3)), ((3, 0), (0, 3)), ((), ()), ((-1,), (1,))):
        check(lambda m, x, s=src, d=dst: m.movedim(x, s, d), a)
        check(lambda m, x, s=src, d=dst: x.moveaxis(s, d), a)
    _, k = a
    assert k.movedim(0, 1)._storage_ptr() == k._storage_ptr()
    with pytest.raises(RuntimeError, match="same number of dims"):
        kiln.movedim(k, (0, 1), (0,))
    with pytest.raises(RuntimeError, match="repeated dim in `source`"):
        kiln.movedim(k, (0, 0), (0, 1))
    with pytest.raises(RuntimeError, match="repeated dim in `destination`"):
        kiln.movedim(k, (0, 1), (1, 1))


# ---- triangles and diagonals ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_tril_triu(dtype):
    a = make((2, 4, 5), dtype)
    for k in (0, 1, -1, 3, -7, 10):
        check(lambda m, x, k=k: m.tril(x, k), a)
        check(lambda m, x, k=k: x.triu(diagonal=k), a)
    check(lambda m, x: m.tril(x), transposed((4, 3), dtype))
    check(lambda m, x: m.triu(x, 1), make((0, 3), dtype))


def test_tril_triu_inplace_and_errors():
    t, k = make((3, 3), "float32")
    v = k._version
    k.tril_(-1)
    t.tril_(-1)
    assert_close(k, t)
    assert k._version > v
    assert_close(k.triu_(), t.triu_())
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        kiln.tril(k[0])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "bool"])
def test_diagonal_family(dtype):
    a = make((3, 4), dtype)
    for off in (0, 1, -1, 3, -3, 5):
        check(lambda m, x, o=off: m.diagonal(x, o), a)
        check(lambda m, x, o=off: m.diag(x, o), a)
    b = make((2, 3, 4), dtype)
    check(lambda m, x: m.diagonal(x, 1, 2, 0), b)
    check(lambda m, x: x.diagonal(offset=-1, dim1=-1, dim2=-2), b)
    check(lambda m, x: m.diagonal(x), transposed((3, 4), dtype))
    v = make((3,), dtype)
    for off in (0, 2, -1):
        check(lambda m, x, o=off: m.diag(x, o), v)
        check(lambda m, x, o=off: m.diag_embed(x, o), v)
    check(lambda m, x: m.diag_embed(x), a)
    check(lambda m, x: m.diag_embed(x, 1, 0, 2), a)
    check(lambda m, x: x.diag_embed(dim1=-1, dim2=0), a)


def test_diagonal_is_a_view_and_errors():
    _, k = make((3, 3), "float32")
    d = k.diagonal()
    d.fill_(9.0)
    assert [k.tolist()[i][i] for i in range(3)] == [9.0] * 3
    with pytest.raises(RuntimeError, match="cannot be identical"):
        kiln.diagonal(k, 0, 1, 1)
    with pytest.raises(RuntimeError, match="Supports 1D or 2D"):
        kiln.diag(k.unsqueeze(0))
    with pytest.raises(IndexError):
        kiln.diagonal(k[0])


# ---- broadcasting --------------------------------------------------------------------------------


def test_broadcast_to_and_tensors():
    a, b, c = make((3, 1), "float32"), make((4,), "int32"), make((), "bool")
    check(lambda m, x: m.broadcast_to(x, (2, 3, 5)), a)
    check(lambda m, x: x.broadcast_to((3, -1)), a)
    check(lambda m, x, y, z: m.broadcast_tensors(x, y, z), a, b, c)
    check(lambda m, x, y: m.broadcast_tensors(x, y), a, transposed((2, 3, 4), "float32"))
    assert kiln.broadcast_shapes((3, 1), (4,), 1) == torch.broadcast_shapes((3, 1), (4,), 1)
    assert kiln.broadcast_shapes() == torch.broadcast_shapes()
    _, k = a
    assert kiln.broadcast_to(k, (2, 3, 5))._storage_ptr() == k._storage_ptr()
    with pytest.raises(RuntimeError, match=r"broadcast_to.*\[3, 1\].*\[2, 5\]"):
        kiln.broadcast_to(k, (2, 5))
    with pytest.raises(RuntimeError, match=r"broadcast_tensors.*\[3, 1\] and \[2, 1\]"):
        kiln.broadcast_tensors(k, k[0:2])
    with pytest.raises(RuntimeError, match="mismatch"):
        kiln.broadcast_shapes((2,), (3,))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    a, b, c = make((3,), "float32", 0), make((4,), "float32", 1), make((), "float32", 2)
    check(lambda m, x, y: m.meshgrid(x, y, indexing=indexing), a, b)
    check(lambda m, x, y, z: m.meshgrid([x, y, z], indexing=indexing), a, b, c)
    check(lambda m, x: m.meshgrid(x, indexing=indexing), a)
    check(lambda m, x, y: m.meshgrid(x, y, indexing=indexing), a, make((0,), "float32"))


def test_meshgrid_default_and_errors():
    a, b = make((3,), "int64", 0), make((2,), "int64", 1)
    check(lambda m, x, y: m.meshgrid(x, y, indexing="ij"), a, b)
    assert [t.shape for t in kiln.meshgrid(a[1], b[1])] == [(3, 2), (3, 2)]
    _, k = make((2, 2), "float32")
    with pytest.raises(RuntimeError, match="0D or 1D"):
        kiln.meshgrid(k)
    with pytest.raises(RuntimeError, match="same dtype"):
        kiln.meshgrid(a[1], k[0])
    with pytest.raises(RuntimeError, match="indexing must be one of"):
        kiln.meshgrid(a[1], indexing="foo")


# ---- function forms of the view methods ----------------------------------------------------------


def test_view_functions():
    a = make((2, 3, 4), "float32")
    check(lambda m, x: m.reshape(x, (4, -1)), a)
    check(lambda m, x: m.permute(x, (2, 0, 1)), a)
    check(lambda m, x: m.transpose(x, 0, -1), a)
    check(lambda m, x: m.swapaxes(x, 0, 1), a)
    check(lambda m, x: m.swapdims(x, 1, 2), a)
    check(lambda m, x: m.t(x[0]), a)
    check(lambda m, x: m.squeeze(m.unsqueeze(x, 1)), a)
    check(lambda m, x: m.squeeze(x[:1], 0), a)
    check(lambda m, x: m.flatten(x, 1), a)
    check(lambda m, x: m.unflatten(x, 2, (2, 2)), a)
    check(lambda m, x: m.narrow(x, 1, 1, 2), a)
    check(lambda m, x: m.select(x, 2, -1), a)
    assert kiln.numel(a[1]) == torch.numel(a[0])


def test_large_inputs_use_threads():
    """Big enough to split over the thread pool: results must not depend on the split."""
    t, k = make((300, 400), "float32")
    mt, mk = make((300, 400), "bool", seed=1)
    it = torch.randint(0, 300, (300, 400), generator=torch.Generator().manual_seed(2))
    ik = to_kiln(it)
    assert_close(k.gather(0, ik), t.gather(0, it))
    assert_close(k[ik[:, 0]], t[it[:, 0]])
    assert_close(k.masked_fill(mk, 1.0), t.masked_fill(mt, 1.0))
    assert_close(k[mk], t[mt])
    assert_close(k.t().flip(0), t.t().flip(0))
    assert_close(k.t().repeat(1, 2), t.t().repeat(1, 2))
    assert_close(kiln.cat([k.t(), k.t()], 1), torch.cat([t.t(), t.t()], 1))
    assert_close(k.triu(3), t.triu(3))
