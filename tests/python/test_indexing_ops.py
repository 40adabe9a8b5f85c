"""Indexing ops (masked_fill/select, gather/scatter, index_select/add/put, take, nonzero)."""

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_close, make, to_kiln

import kiln


def idx(values, dtype=torch.int64):
    t = torch.tensor(values, dtype=dtype)
    return t, to_kiln(t)


def rand_index(shape, high, seed=0, dtype=torch.int64):
    t = torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    return t, to_kiln(t)


def perm_index(shape, dim, seed=0):
    """An index along `dim` without duplicates (scatter with duplicates is order-dependent)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.argsort(torch.rand(shape, generator=g), dim=dim)
    return t, to_kiln(t)


# ---- masked_fill / masked_select -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_fill(dtype):
    t, k = make((3, 4), dtype)
    mt, mk = make((3, 4), "bool", seed=1)
    value = True if dtype == "bool" else 2
    assert_close(kiln.masked_fill(k, mk, value), torch.masked_fill(t, mt, value))
    assert_close(k.masked_fill(mk[0], 1.5), t.masked_fill(mt[0], 1.5))  # broadcast mask
    assert_close(k.t().masked_fill(mk.t(), value), t.t().masked_fill(mt.t(), value))
    vt, vk = make((), "float64", seed=2)
    assert_close(k.masked_fill(mk, vk), t.masked_fill(mt, vt))  # 0-d tensor value
    assert_close(kiln.masked_fill(k[0], mk, value), torch.masked_fill(t[0], mt, value))
    t0, k0 = make((0, 4), dtype)
    assert_close(k0.masked_fill(mk[0], value), t0.masked_fill(mt[0], value))


def test_masked_fill_inplace():
    t, k = make((3, 4), "float32")
    mt, mk = make((4,), "bool", seed=1)
    v = k._version
    r = k.masked_fill_(mk, -1.0)
    t.masked_fill_(mt, -1.0)
    assert r is k and k._version > v
    assert_close(k, t)
    tt, kt = t.t(), k.t()
    kt[1].masked_fill_(mk[:3], 5.0)
    tt[1].masked_fill_(mt[:3], 5.0)
    assert_close(k, t)


def test_masked_fill_errors():
    _, k = make((3, 4), "float32")
    _, mk = make((3, 4), "bool")
    with pytest.raises(RuntimeError, match="boolean masks, but got mask with dtype int"):
        k.masked_fill(to_kiln(torch.ones(3, 4, dtype=torch.int32)), 1.0)
    with pytest.raises(RuntimeError, match=r"0-dimensional value tensor, but got tensor with 1"):
        k.masked_fill(mk, k[0, :1])
    with pytest.raises(RuntimeError, match=r"output with shape \[4\] doesn't match the broadcast"):
        k[0].masked_fill_(mk, 1.0)
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        k.masked_fill(mk[:2], 1.0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool"])
def test_masked_select(dtype):
    t, k = make((3, 4), dtype)
    mt, mk = make((3, 4), "bool", seed=1)
    assert_close(kiln.masked_select(k, mk), torch.masked_select(t, mt))
    assert_close(k.masked_select(mk[1]), t.masked_select(mt[1]))
    assert_close(k[0].masked_select(mk), t[0].masked_select(mt))
    assert_close(k.t().masked_select(mk.t()), t.t().masked_select(mt.t()))
    with pytest.raises(RuntimeError, match="boolean masks"):
        k.masked_select(k.float())


# ---- nonzero / argwhere --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_nonzero(dtype):
    t, k = make((3, 4, 2), dtype, low=-1.0, high=1.0)
    assert_close(kiln.nonzero(k), torch.nonzero(t))
    assert_close(k.transpose(0, 2).nonzero(), t.transpose(0, 2).nonzero())
    got, want = kiln.nonzero(k, as_tuple=True), torch.nonzero(t, as_tuple=True)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w)
    assert_close(kiln.argwhere(k), torch.argwhere(t))


def test_nonzero_special_values():
    t = torch.tensor([0.0, -0.0, float("nan"), 1e-30, float("-inf")])
    assert_close(kiln.nonzero(to_kiln(t)), torch.nonzero(t))
    for shape in ((), (0, 3)):
        t, k = make(shape, "int32")
        assert_close(k.nonzero(), t.nonzero())
        for got, want in zip(k.nonzero(as_tuple=True), t.nonzero(as_tuple=True), strict=True):
            assert_close(got, want)
    big = torch.zeros(200_000)
    big[::7] = 1.0
    assert_close(kiln.nonzero(to_kiln(big)), torch.nonzero(big))


# ---- gather / index_select / take ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(dtype):
    t, k = make((3, 4), dtype)
    for dim, shape in ((0, (2, 4)), (1, (3, 6)), (-1, (2, 2)), (0, (5, 1))):
        it, ik = rand_index(shape, t.shape[dim])
        assert_close(kiln.gather(k, dim, ik), torch.gather(t, dim, it))
        assert_close(k.gather(dim, ik), t.gather(dim, it))
    it, ik = rand_index((4, 2), 4)
    assert_close(k.t().gather(0, ik), t.t().gather(0, it))
    assert_close(k.gather(1, ik.t()), t.gather(1, it.t()))
    it, ik = rand_index((2, 3), 3, dtype=torch.int32)
    assert_close(k.gather(0, ik), t.gather(0, it))


def test_gather_edge_cases_and_errors():
    t, k = make((3, 4), "float32")
    e = torch.zeros(0, 4, dtype=torch.int64)
    assert_close(k.gather(0, to_kiln(e)), t.gather(0, e))
    t0, k0 = make((), "float32")
    z = torch.tensor(0)
    assert_close(k0.gather(0, to_kiln(z)), t0.gather(0, z))
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0 with size 3"):
        k.gather(0, to_kiln(torch.tensor([[3]])))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        k.gather(0, to_kiln(torch.tensor([1])))
    with pytest.raises(RuntimeError, match=r"Size does not match at dimension 1"):
        k.gather(0, to_kiln(torch.zeros(1, 5, dtype=torch.int64)))
    with pytest.raises(RuntimeError, match="int64"):
        k.gather(0, to_kiln(torch.zeros(1, 1)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select(dtype):
    t, k = make((3, 4, 2), dtype)
    for dim in (0, 1, 2, -1):
        for values in ([0], [2, 0, 1, 0], []):
            it = torch.tensor([v % t.shape[dim] for v in values], dtype=torch.int64)
            assert_close(kiln.index_select(k, dim, to_kiln(it)), torch.index_select(t, dim, it))
    it, ik = idx([1, 0], torch.int32)
    assert_close(k.transpose(0, 2).index_select(1, ik), t.transpose(0, 2).index_select(1, it))
    it, ik = idx(1)
    assert_close(k.index_select(0, ik), t.index_select(0, it))
    t0, k0 = make((), dtype)
    assert_close(k0.index_select(0, ik[None] * 0), t0.index_select(0, it[None] * 0))


def test_index_select_errors():
    _, k = make((3, 4), "float32")
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        k.index_select(0, to_kiln(torch.tensor([3])))
    with pytest.raises(IndexError, match="index -1"):
        k.index_select(1, to_kiln(torch.tensor([-1])))
    with pytest.raises(RuntimeError, match="int32 or int64"):
        k.index_select(0, to_kiln(torch.tensor([1.0])))
    with pytest.raises(IndexError, match="supposed to be a vector"):
        k.index_select(0, to_kiln(torch.tensor([[1]])))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int16", "bool"])
def test_take(dtype):
    t, k = make((3, 4), dtype)
    for values in ([0, 11, -1, -12, 5], [[1, 2], [3, 4]], 7, []):
        it, ik = idx(values)
        assert_close(kiln.take(k, ik), torch.take(t, it))
        assert_close(k.t().take(ik), t.t().take(it))
    with pytest.raises(IndexError, match="index 12 is out of bounds"):
        k.take(to_kiln(torch.tensor([12])))
    with pytest.raises(RuntimeError, match="int64"):
        k.take(to_kiln(torch.tensor([1], dtype=torch.int32)))


# ---- scatter family ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_src_and_value(dtype):
    t, k = make((4, 5), dtype)
    st, sk = make((4, 5), dtype, seed=3)
    for dim in (0, 1, -1):
        it, ik = perm_index((3, 4), dim if dim >= 0 else 1, seed=dim + 5)
        assert_close(kiln.scatter(k, dim, ik, sk), torch.scatter(t, dim, it, st))
        assert_close(k.scatter(dim, ik, sk.t().contiguous().t()), t.scatter(dim, it, st))
        value = True if dtype == "bool" else 3
        assert_close(k.scatter(dim, ik, value), t.scatter(dim, it, value))
        assert_close(kiln.scatter(k, dim, ik, value=value), torch.scatter(t, dim, it, value=value))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64"])
@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_argument(dtype, reduce):
    t, k = make((4, 3), dtype, low=-2, high=2)
    st, sk = make((6, 3), dtype, seed=1, low=-2, high=2)
    it, ik = rand_index((6, 3), 4)  # duplicates combine
    assert_close(k.scatter(0, ik, sk, reduce=reduce), t.scatter(0, it, st, reduce=reduce))
    assert_close(k.scatter(0, ik, 2, reduce=reduce), t.scatter(0, it, 2, reduce=reduce))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int8", "int64"])
def test_scatter_add(dtype):
    t, k = make((4, 3), dtype, low=-2, high=2)
    st, sk = make((5, 3), dtype, seed=1, low=-2, high=2)
    it, ik = rand_index((5, 3), 4)
    assert_close(kiln.scatter_add(k, 0, ik, sk), torch.scatter_add(t, 0, it, st))
    it, ik = rand_index((4, 2), 3, seed=2)
    assert_close(k.scatter_add(1, ik, sk), t.scatter_add(1, it, st))
    v = k._version
    r = k.scatter_add_(1, ik, sk)
    assert r is k and k._version > v
    assert_close(k, t.scatter_add_(1, it, st))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("case", ["rows", "columns", "negative", "narrower", "strided_src"])
def test_scatter_add_with_a_row_index_equals_torch(dtype, case):
    """An index repeated across the other dims (`idx.unsqueeze(1).expand(n, f)`, message passing)
    adds whole rows: the same sums as the element-wise scatter, duplicates included."""
    t, k = make((6, 5, 4), dtype, low=-2, high=2)
    dim = 1 if case == "columns" else 0
    n = 9
    shape = [6, 5, 4]
    shape[dim] = n
    src_t, src_k = make(tuple(shape), dtype, seed=1, low=-2, high=2)
    if case == "strided_src":  # a transposed source: not contiguous, the general path
        src_t = src_t.transpose(1, 2).contiguous().transpose(1, 2)
        src_k = to_kiln(src_t)
    flat = torch.randint(-6 if case == "negative" else 0, t.shape[dim], (n,),
                         generator=torch.Generator().manual_seed(3))
    view = [1, 1, 1]
    view[dim] = n
    if case == "negative":  # scatter_add takes no negative index: both raise
        flat = torch.where(flat < 0, flat, -1)
    it = flat.view(view).expand(*shape)
    if case == "narrower":  # the index covers fewer columns than self: no row path
        it, src_t, src_k = it[:, :3], src_t[:, :3], to_kiln(src_t[:, :3])
    ik = to_kiln(it)
    if case == "negative":
        with pytest.raises(RuntimeError):
            t.clone().scatter_add_(dim, it, src_t)
        with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 0"):
            k.clone().scatter_add_(dim, ik, src_k)
        return
    assert_close(k.clone().scatter_add_(dim, ik, src_k), t.clone().scatter_add_(dim, it, src_t))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(dtype, reduce, include_self):
    t, k = make((4, 3), dtype, low=-2, high=2)
    st, sk = make((6, 3), dtype, seed=1, low=-2, high=2)
    it, ik = rand_index((6, 3), 3)  # row 3 never scattered to
    want = torch.scatter_reduce(t, 0, it, st, reduce, include_self=include_self)
    got = kiln.scatter_reduce(k, 0, ik, sk, reduce, include_self=include_self)
    assert_close(got, want)
    k.scatter_reduce_(0, ik, sk, reduce=reduce, include_self=include_self)
    assert_close(k, want)


def test_scatter_errors():
    _, k = make((3, 4), "float32")
    _, ik = idx([[0, 1]])
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0 with size 3"):
        k.scatter(0, to_kiln(torch.tensor([[3]])), 1.0)
    with pytest.raises(RuntimeError, match="self.dtype to be equal to src.dtype"):
        k.scatter(0, ik, k.double())
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        k.scatter(0, to_kiln(torch.tensor([0])), k)
    with pytest.raises(RuntimeError, match="no larger than src"):
        k.scatter(0, ik, k[:1, :1])
    with pytest.raises(RuntimeError, match="either add or multiply"):
        k.scatter(0, ik, k, reduce="sum")
    with pytest.raises(RuntimeError, match="sum, prod, mean, amax, amin"):
        k.scatter_reduce(0, ik, k, "max")
    with pytest.raises(TypeError, match=r"scatter\(\) received an invalid combination"):
        k.scatter(0, ik)
    with pytest.raises(NotImplementedError, match="scatter with a value on a tensor that requires"):
        k.clone().requires_grad_().scatter(0, ik, 1.0)


# ---- index_add / index_put -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int32", "int64"])
def test_index_add(dtype):
    t, k = make((4, 3), dtype, low=-2, high=2)
    st, sk = make((5, 3), dtype, seed=1, low=-2, high=2)
    it, ik = idx([0, 2, 0, 3, 2])
    assert_close(kiln.index_add(k, 0, ik, sk), torch.index_add(t, 0, it, st))
    assert_close(k.index_add(0, ik.int(), sk, alpha=2), t.index_add(0, it.int(), st, alpha=2))
    st2, sk2 = make((4, 2), dtype, seed=2)
    it2, ik2 = idx([2, 2])
    assert_close(k.t().index_add(0, ik2, sk2.t()), t.t().index_add(0, it2, st2.t()))
    v = k._version
    k.index_add_(1, ik2, sk2)
    t.index_add_(1, it2, st2)
    assert k._version > v
    assert_close(k, t)


def test_index_add_errors():
    _, k = make((4, 3), "float32")
    _, s = make((2, 3), "float32")
    with pytest.raises(RuntimeError, match=r"Number of indices \(3\)"):
        k.index_add(0, to_kiln(torch.tensor([0, 1, 2])), s)
    with pytest.raises(RuntimeError, match="same scalar type"):
        k.index_add(0, to_kiln(torch.tensor([0, 1])), s.double())
    with pytest.raises(RuntimeError, match="index 4 is out of bounds"):
        k.index_add(0, to_kiln(torch.tensor([0, 4])), s)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(dtype, accumulate):
    t, k = make((4, 3), dtype)
    cases = [
        ((torch.tensor([0, 2]),), (2, 3)),
        ((torch.tensor([0, 0 if accumulate else 2, 3]), torch.tensor([1, 1, 2])), (3,)),
        ((torch.tensor([[1], [3]]), torch.tensor([0, 2])), (2, 2)),
        ((torch.tensor([True, False, True, True]),), (3,)),
    ]
    if accumulate and dtype == "bool":
        cases = cases[:1]
    for i, (indices, vshape) in enumerate(cases):
        vt, vk = make(vshape, dtype, seed=i + 1)
        kidx = tuple(None if x is None else to_kiln(x) for x in indices)
        want = torch.index_put(t, indices, vt, accumulate=accumulate)
        assert_close(kiln.index_put(k, kidx, vk, accumulate=accumulate), want)
        assert_close(k.index_put(kidx, vk, accumulate), want)
    indices = (torch.tensor([1, 3]),)
    vt, vk = make((3,), dtype, seed=9)
    t.index_put_(indices, vt, accumulate=accumulate)
    v = k._version
    r = k.index_put_((to_kiln(indices[0]),), vk, accumulate=accumulate)
    assert r is k and k._version > v
    assert_close(k, t)


def test_index_put_none_keeps_dim():
    t, k = make((4, 3), "float32")
    vt, vk = make((4, 2), "float32", seed=1)
    t[:, [2, 0]] = vt
    assert_close(k.index_put((None, to_kiln(torch.tensor([2, 0]))), vk), t)


def test_index_put_errors():
    _, k = make((4, 3), "float32")
    _, ik = idx([0, 1])
    with pytest.raises(RuntimeError, match="got float32 for the destination and float64"):
        k.index_put_((ik,), k[0].double())
    with pytest.raises(RuntimeError, match=r"value tensor of shape \[4\] cannot be broadcast"):
        k.index_put_((ik,), k[:, 0])
    with pytest.raises(TypeError, match="Tensors or None"):
        k.index_put_((1,), k[0])
    with pytest.raises(IndexError, match="index 4 is out of bounds"):
        k.index_put_((to_kiln(torch.tensor([4])),), k[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_add_rows_of_contiguous_tensors(dtype, dim):
    """The whole-row path of index_add (contiguous float tensors) equals torch's, repeated
    indices accumulating, along every dim."""
    rng = np.random.default_rng(dim)
    base = rng.normal(size=(4, 5, 6)).astype(dtype)
    n = 7
    index = rng.integers(0, base.shape[dim], n)
    src_shape = list(base.shape)
    src_shape[dim] = n
    src = rng.normal(size=src_shape).astype(dtype)
    ours = kiln.from_numpy(base.copy()).index_add_(dim, kiln.from_numpy(index),
                                                   kiln.from_numpy(src), alpha=2)
    theirs = torch.from_numpy(base.copy()).index_add_(dim, torch.from_numpy(index),
                                                      torch.from_numpy(src), alpha=2)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_gradients_equal_torch(reduce, include_self):
    # Values rounded to one decimal tie, so amax/amin share their gradient as torch's do.
    rng = np.random.default_rng(3)
    x = np.round(rng.normal(size=(4, 5)), 1)
    src = np.round(rng.normal(size=(6, 5)), 1)
    index = rng.integers(0, 3, (6, 5))  # row 3 is never scattered to
    weight = rng.normal(size=(4, 5))
    grads = []
    for lib in (torch, kiln):
        a, s = lib.tensor(x, requires_grad=True), lib.tensor(src, requires_grad=True)
        out = lib.scatter_reduce(a, 0, lib.tensor(index), s, reduce, include_self=include_self)
        (out * lib.tensor(weight)).sum().backward()
        grads.append((a.grad.numpy(), s.grad.numpy()))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-12)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-12)
    a = kiln.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    s = kiln.tensor(rng.normal(size=(5, 4)), requires_grad=True)
    i = kiln.tensor(rng.integers(0, 3, (5, 4)))
    assert kiln.autograd.gradcheck(
        lambda a, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self), (a, s))


def test_scatter_reduce_prod_is_not_differentiable_yet():
    k = kiln.ones(3, requires_grad=True)
    with pytest.raises(NotImplementedError, match="scatter_reduce"):
        k.scatter_reduce(0, kiln.tensor([0, 1]), kiln.ones(2), "prod")
