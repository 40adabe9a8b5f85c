"""Ops that model code calls and kiln lacked (AttributeError on import-swapped code): the
special functions, xlogy and friends, searching and counting, index_fill / index_copy /
masked_scatter, block_diag and the split/stack helpers, finfo/iinfo/result_type, and the
complex-number views of real tensors. Each is checked against torch over dtypes and edge
values, with gradients where torch has them, and compiled with no eager node."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import kiln
from kiln._capture.backend_compiled import CpuBackend

DTYPES = [(kiln.float64, torch.float64), (kiln.float32, torch.float32)]
EDGES = [0.0, -0.0, -1.0, -2.0, -0.5, 1e-8, 1.0, 2.0, math.inf, -math.inf, math.nan, 170.0, 1e10]


def _k(a, dtype=None):
    t = kiln.from_numpy(np.asarray(a))
    return t if dtype is None else t.to(dtype)


def _t(a, dtype=None):
    t = torch.from_numpy(np.asarray(a))
    return t if dtype is None else t.to(dtype)


def _same(ours: kiln.Tensor, theirs: torch.Tensor, rtol=0.0, atol=0.0) -> None:
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.to(kiln.float64).numpy() if ours.is_floating_point()
                               else ours.numpy(), theirs.double().numpy() if
                               theirs.is_floating_point() else theirs.numpy(),
                               rtol=rtol, atol=atol, equal_nan=True)  # fmt: skip


def _compiled_alone(fn, *args) -> list:
    """fn compiled strictly (a decline raises) and its results; asserts one compiled part."""
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    out = kiln.compile(fn, backend=backend)(*args)
    assert [len(r.parts) for r in backend.reports] == [1]
    assert all(r.eager_nodes == 0 for r in backend.reports)
    return out


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfinv", "sinc", "deg2rad", "rad2deg",
                                  "logit"])  # fmt: skip
@pytest.mark.parametrize("dtypes", DTYPES, ids=["float64", "float32"])
def test_unary_special_functions(name, dtypes):
    kd, td = dtypes
    if name == "erfinv":
        values = np.concatenate([np.linspace(-1, 1, 401), [1.5, -2.0, 0.9999999, math.nan]])
    else:
        values = np.concatenate([np.linspace(-5.5, 40, 401), EDGES])
    rtol = 1e-11 if kd == kiln.float64 else 2e-6
    ours, theirs = getattr(kiln, name)(_k(values, kd)), getattr(torch, name)(_t(values, td))
    finite = np.isfinite(theirs.double().numpy())
    _same(ours[_k(~finite)], theirs[_t(~finite)])  # the infinities and NaNs exactly
    scale = np.maximum(1.0, np.abs(theirs.double().numpy()[finite]))
    err = np.abs(ours.to(kiln.float64).numpy()[finite] - theirs.double().numpy()[finite]) / scale
    assert err.max() <= rtol, (name, err.max())


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfinv", "sinc", "deg2rad", "logit"])
def test_unary_special_functions_promote_integers(name):
    values = np.array([1, 2, 0, 3]) if name != "erfinv" else np.array([0, 0, 1, -1])
    _same(getattr(kiln, name)(_k(values)), getattr(torch, name)(_t(values)), rtol=1e-6)


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfinv", "sinc", "logit", "xlogy",
                                  "copysign", "logaddexp2"])  # fmt: skip
def test_gradients_and_compiled_forms(name):
    g = np.random.default_rng(0)
    x = g.uniform(0.1, 3, 40)
    if name in ("erfinv", "logit"):
        x = x / 3.1
    args = [x] + ([g.uniform(-3, 3, 40)] if name in ("xlogy", "copysign", "logaddexp2") else [])
    if name == "xlogy":
        args[1] = np.abs(args[1])
    ka = [_k(a).requires_grad_() for a in args]
    ta = [_t(a).requires_grad_() for a in args]
    ours, theirs = getattr(kiln, name)(*ka), getattr(torch, name)(*ta)
    _same(ours.detach(), theirs.detach(), rtol=1e-12, atol=1e-14)
    ours.sum().backward()
    theirs.sum().backward()
    for k, t in zip(ka, ta, strict=True):
        grad = k.grad.numpy() if k.grad is not None else np.zeros(40)  # copysign's sign operand
        np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-8, atol=1e-12)
    with kiln.no_grad():
        compiled = _compiled_alone(lambda *a: getattr(kiln, name)(*a) * 2 + 1,
                                   *[a.detach() for a in ka])
    np.testing.assert_allclose(compiled.numpy(), ours.detach().numpy() * 2 + 1, rtol=1e-14)


def test_xlogy_gradient_at_zero_is_torchs():
    x, y = np.array([0.0, 0.0, 0.0, 1.0]), np.array([2.0, 0.0, -1.0, 3.0])
    k, t = _k(x).requires_grad_(), _t(x).requires_grad_()
    kiln.xlogy(k, _k(y)).sum().backward()
    torch.xlogy(t, _t(y)).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy())


def test_in_place_forms_write_their_tensor():
    x = _k(np.array([0.5, 2.0, 3.0]))
    assert x.lgamma_() is x
    _same(x, torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64).lgamma_(), rtol=1e-14)
    y = _k(np.array([1.0, 0.0, 2.0]))
    y.xlogy_(_k(np.array([2.0, 0.0, math.e])))
    np.testing.assert_allclose(y.numpy(), [math.log(2), 0.0, 2.0])


def test_xlogy_heaviside_copysign_semantics():
    x = np.array([0.0, 0.0, 1.0, 2.0])
    y = np.array([math.nan, 0.0, 0.0, 3.0])
    _same(kiln.xlogy(_k(x), _k(y)), torch.xlogy(_t(x), _t(y)))
    _same(kiln.xlogy(2, _k(y)), torch.xlogy(2, _t(y)))
    _same(kiln.xlogy(_k(np.array([1, 2])), 3), torch.xlogy(torch.tensor([1, 2]), 3))
    _same(kiln.heaviside(_k(x - 1), _k(np.array(0.5))), torch.heaviside(_t(x - 1),
                                                                        torch.tensor(0.5,
                                                                                     dtype=torch.float64)))  # noqa: E501
    with pytest.raises(RuntimeError, match="different dtypes"):
        kiln.heaviside(_k(x), kiln.tensor(0.5))
    signs = np.array([-0.0, 0.0, -1.0, 1.0])
    _same(kiln.copysign(_k(x + 1), _k(signs)), torch.copysign(_t(x + 1), _t(signs)))
    _same(kiln.copysign(_k(np.array([1, -2])), -1), torch.copysign(torch.tensor([1, -2]), -1))
    _same(kiln.logaddexp2(_k(x), _k(y)), torch.logaddexp2(_t(x), _t(y)), rtol=1e-15)


SEQ = np.array([1.0, 3.0, 3.0, 5.0, 7.0])
VALUES = np.array([[0.0, 3.0, 6.0], [9.0, 3.0, 1.0]])


@pytest.mark.parametrize("kw", [{}, {"right": True}, {"side": "right"}, {"out_int32": True}])
def test_searchsorted_and_bucketize(kw):
    _same(kiln.searchsorted(_k(SEQ), _k(VALUES), **kw), torch.searchsorted(_t(SEQ), _t(VALUES),
                                                                           **kw))
    if "side" not in kw:
        _same(kiln.bucketize(_k(VALUES), _k(SEQ), **kw), torch.bucketize(_t(VALUES), _t(SEQ),
                                                                         **kw))
    rows = np.sort(np.random.default_rng(1).uniform(size=(3, 17)))
    probes = np.random.default_rng(2).uniform(size=(3, 5))
    _same(kiln.searchsorted(_k(rows), _k(probes), **kw), torch.searchsorted(_t(rows), _t(probes),
                                                                            **kw))


def test_searchsorted_edge_cases():
    _same(kiln.searchsorted(_k(SEQ), 3.0), torch.searchsorted(_t(SEQ), 3.0))
    empty = np.zeros(0)
    _same(kiln.searchsorted(_k(empty), _k(VALUES)), torch.searchsorted(_t(empty), _t(VALUES)))
    order = np.array([4, 0, 2, 1, 3])
    shuffled = SEQ[np.argsort(order)]
    sorter = np.argsort(shuffled)
    _same(kiln.searchsorted(_k(shuffled), _k(VALUES), sorter=_k(sorter)),
          torch.searchsorted(_t(shuffled), _t(VALUES), sorter=_t(sorter)))
    with pytest.raises(RuntimeError, match="side can only be 'left' or 'right'"):
        kiln.searchsorted(_k(SEQ), _k(VALUES), side="middle")
    with pytest.raises(RuntimeError, match="first N-1 dimensions"):
        kiln.searchsorted(_k(np.zeros((2, 3))), _k(np.zeros((3, 1))))


def test_isin_bincount_histc():
    e, t = np.array([1, 2, 3, 7, 7]), np.array([7, 2, 2])
    for kw in ({}, {"invert": True}):
        _same(kiln.isin(_k(e), _k(t), **kw), torch.isin(_t(e), _t(t), **kw))
    _same(kiln.isin(_k(e), 2), torch.isin(_t(e), 2))
    _same(kiln.isin(_k(e), _k(np.zeros(0, np.int64))), torch.isin(_t(e), _t(np.zeros(0,
                                                                                      np.int64))))
    counts = np.array([0, 2, 2, 5])
    _same(kiln.bincount(_k(counts)), torch.bincount(_t(counts)))
    for w in (np.array([0.5, 1, 1, 2], np.float32), np.array([1, 2, 3, 4], np.int32)):
        _same(kiln.bincount(_k(counts), _k(w), minlength=8),
              torch.bincount(_t(counts), _t(w), minlength=8))
    _same(kiln.bincount(_k(np.zeros(0, np.int64))), torch.bincount(_t(np.zeros(0, np.int64))))
    with pytest.raises(RuntimeError, match="non-negative integral"):
        kiln.bincount(_k(np.array([-1, 2])))
    data = np.random.default_rng(3).normal(size=200)
    for kw in ({"bins": 7, "min": -1, "max": 1}, {"bins": 5}, {}):
        _same(kiln.histc(_k(data), **kw), torch.histc(_t(data), **kw))


def test_index_fill_copy_and_masked_scatter():
    x = np.arange(12.0).reshape(3, 4)
    idx = np.array([0, -1])
    _same(kiln.index_fill(_k(x), 1, _k(idx), -1.0), torch.index_fill(_t(x), 1, _t(idx), -1.0))
    _same(_k(x).index_fill(0, _k(np.array([1])), kiln.tensor(5.0, dtype=kiln.float64)),
          _t(x).index_fill(0, torch.tensor([1]), torch.tensor(5.0, dtype=torch.float64)))
    source = np.ones((2, 4))
    _same(_k(x).index_copy(0, _k(np.array([2, 0])), _k(source)),
          _t(x).index_copy(0, torch.tensor([2, 0]), _t(source)))
    mask = np.array([True, False, True, False])
    _same(_k(x).masked_scatter(_k(mask), _k(np.arange(100.0))),
          _t(x).masked_scatter(_t(mask), _t(np.arange(100.0))))
    with pytest.raises(RuntimeError, match="at least 6 elements"):
        _k(x).masked_scatter(_k(mask), _k(np.arange(3.0)))
    y = _k(x)
    assert y.index_fill_(1, _k(np.array([1])), 0.0) is y and y[:, 1].abs().sum().item() == 0


def test_index_fill_gradient():
    x = _k(np.arange(6.0).reshape(2, 3)).requires_grad_()
    kiln.index_fill(x, 1, _k(np.array([0])), 7.0).sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]


def test_triangle_indices_block_diag_and_splits():
    for args in ((3, 4, -1), (4, 3, 1), (0, 3), (5, 5)):
        _same(kiln.tril_indices(*args), torch.tril_indices(*args))
        _same(kiln.triu_indices(*args), torch.triu_indices(*args))
    _same(kiln.block_diag(kiln.tensor(1.0), kiln.ones(2), kiln.ones(2, 3, dtype=kiln.float64)),
          torch.block_diag(torch.tensor(1.0), torch.ones(2), torch.ones(2, 3,
                                                                        dtype=torch.float64)))
    _same(kiln.cartesian_prod(kiln.tensor([1, 2]), kiln.tensor([3, 4, 5])),
          torch.cartesian_prod(torch.tensor([1, 2]), torch.tensor([3, 4, 5])))
    _same(kiln.diagflat(_k(np.arange(4.0).reshape(2, 2)), 1),
          torch.diagflat(_t(np.arange(4.0).reshape(2, 2)), 1))
    _same(kiln.column_stack([kiln.arange(3), kiln.ones(3, 2, dtype=kiln.int64)]),
          torch.column_stack([torch.arange(3), torch.ones(3, 2, dtype=torch.int64)]))
    _same(kiln.row_stack([kiln.arange(3), kiln.arange(3)]),
          torch.vstack([torch.arange(3), torch.arange(3)]))
    for name, shape, arg in [("hsplit", (3, 4), 2), ("vsplit", (4, 3), [1, 3]),
                             ("dsplit", (2, 3, 4), 2), ("hsplit", (6,), 3)]:  # fmt: skip
        a = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
        ours, theirs = getattr(kiln, name)(_k(a), arg), getattr(torch, name)(_t(a), arg)
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs, strict=True):
            _same(o, t)
    with pytest.raises(RuntimeError, match="not divisible by the split_size 3"):
        kiln.hsplit(kiln.zeros(2, 4), 3)
    with pytest.raises(RuntimeError, match="at least 2 dimension"):
        kiln.vsplit(kiln.zeros(4), 2)


@pytest.mark.parametrize("case", ["searchsorted", "bucketize", "isin", "index_fill", "index_copy",
                                  "block_diag", "cartesian_prod", "hsplit", "hstack",
                                  "atleast_2d", "sum_to_size", "type"])  # fmt: skip
def test_compiled_with_no_eager_node(case):
    fns = {
        "searchsorted": lambda s, v: kiln.searchsorted(s, v * 2, right=True),
        "bucketize": lambda s, v: kiln.bucketize(v, s) + 1,
        "isin": lambda s, v: kiln.isin(v.round(), s),
        "index_fill": lambda s, v: v.index_fill(1, (s[:2] * 2).long(), -1.0) * 2,
        "index_copy": lambda s, v: v.index_copy(0, s[:2].long(), v[:2] * 3) * 2,
        "block_diag": lambda s, v: kiln.block_diag(s, v) * 2,
        "cartesian_prod": lambda s, v: kiln.cartesian_prod(s, v[0]) * 2,
        "hsplit": lambda s, v: [p * 2 for p in kiln.hsplit(v[:, :4], 2)],
        "hstack": lambda s, v: kiln.hstack([v, v]) + kiln.vstack([s, s]).sum(),
        "atleast_2d": lambda s, v: kiln.atleast_2d(s) * 2,
        "sum_to_size": lambda s, v: v.sum_to_size(1, 5).ravel() * 2,
        "type": lambda s, v: v.type(kiln.float64) * 2 if v.type() == "kiln.FloatTensor" else v,
    }
    fn = fns[case]
    args = (kiln.arange(10.0), kiln.from_numpy(np.random.default_rng(4).normal(size=(4, 5))
                                               .astype(np.float32)))  # fmt: skip
    out, ref = _compiled_alone(fn, *args), fn(*args)
    for o, r in zip(out if isinstance(out, list) else [out], ref if isinstance(ref, list)
                    else [ref], strict=True):  # fmt: skip
        np.testing.assert_allclose(o.numpy(), r.numpy(), rtol=1e-6)


def test_finfo_iinfo_match_torch():
    for kd, td in [(kiln.float32, torch.float32), (kiln.float64, torch.float64),
                   (kiln.float16, torch.float16), (kiln.bfloat16, torch.bfloat16)]:  # fmt: skip
        ours, theirs = kiln.finfo(kd), torch.finfo(td)
        for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution",
                      "dtype"):  # fmt: skip
            assert getattr(ours, field) == getattr(theirs, field), (kd, field)
    assert kiln.finfo() == kiln.finfo(kiln.float32)
    for kd, td in [(kiln.uint8, torch.uint8), (kiln.int8, torch.int8), (kiln.int32, torch.int32),
                   (kiln.int64, torch.int64)]:  # fmt: skip
        ours, theirs = kiln.iinfo(kd), torch.iinfo(td)
        assert (ours.bits, ours.min, ours.max, ours.dtype) == (theirs.bits, theirs.min,
                                                               theirs.max, theirs.dtype)
    with pytest.raises(TypeError, match="requires a floating point input type"):
        kiln.finfo(kiln.int32)
    with pytest.raises(TypeError, match="requires an integer input type"):
        kiln.iinfo(kiln.float32)
    with pytest.raises(TypeError, match="bool is not supported"):
        kiln.iinfo(kiln.bool)


def test_result_type_and_can_cast():
    pairs = [(kiln.tensor([1]), 2.0), (kiln.tensor(1.0, dtype=kiln.float16), kiln.tensor([1])),
             (kiln.tensor([1], dtype=kiln.uint8), kiln.tensor(1, dtype=kiln.int8)), (2, 3.5),
             (kiln.tensor([True]), 1)]  # fmt: skip
    for a, b in pairs:
        ta = torch.tensor(a.tolist(), dtype=getattr(torch, a.dtype.name)) \
            if isinstance(a, kiln.Tensor) else a
        tb = torch.tensor(b.tolist(), dtype=getattr(torch, b.dtype.name)) \
            if isinstance(b, kiln.Tensor) else b
        assert kiln.result_type(a, b).name == str(torch.result_type(ta, tb)).split(".")[-1]
    assert not kiln.can_cast(kiln.float32, kiln.int32)
    assert kiln.can_cast(kiln.int32, kiln.float32) and not kiln.can_cast(kiln.int32, kiln.bool)


def test_dtype_facts_are_constants_of_the_capture():
    """`masked_fill(mask, finfo(dtype).min)` (transformer attention masks) compiles whole."""

    def fn(x, m):
        y = x.masked_fill(m, kiln.finfo(x.dtype).min).softmax(-1)
        return y.to(kiln.promote_types(x.dtype, kiln.float64)) * kiln.iinfo(kiln.int8).max, \
            kiln.result_type(x, 2)

    x = kiln.from_numpy(np.random.default_rng(5).normal(size=(3, 4)).astype(np.float32))
    m = x > 1
    out, dtype = _compiled_alone(fn, x, m)
    ref, ref_dtype = fn(x, m)
    assert dtype == ref_dtype == kiln.float32
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)


def test_real_tensor_views_and_queries():
    x = kiln.from_numpy(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    t = torch.arange(6.0).reshape(2, 3)
    assert x.conj() is x and x.resolve_conj() is x and x.resolve_neg() is x and x.real is x
    assert not (x.is_complex() or x.is_conj() or x.is_neg() or kiln.is_complex(x))
    assert x.type() == "kiln.FloatTensor" and x.long().type() == "kiln.LongTensor"
    assert x.type(kiln.int32).dtype == kiln.int32
    assert x.type("torch.DoubleTensor").dtype == kiln.float64
    assert x.get_device() == -1 and x.pin_memory() is x and not x.is_pinned()
    assert x.is_signed() and not x.byte().is_signed() and not x.is_inference()
    assert kiln.isreal(x).all().item() and kiln.is_same_size(x, x + 1)
    assert kiln.tensor([0.0]).is_nonzero() is False
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        x.is_nonzero()
    with pytest.raises(RuntimeError, match="imag is not implemented"):
        x.imag  # noqa: B018
    assert x.H.tolist() == t.H.tolist() and x.mH.tolist() == t.mH.tolist()
    with pytest.raises(RuntimeError, match="tensor.H is only supported on matrices"):
        kiln.zeros(2, 2, 2).H  # noqa: B018
    _same(x.sum_to_size(1, 3), t.sum_to_size(1, 3))
    _same(x.sum_to_size(3), t.sum_to_size(3))
    with pytest.raises(RuntimeError, match="is not expandable to size"):
        x.sum_to_size(2)
    _same(x.ravel(), t.ravel())
    _same(kiln.inner(x, x), torch.inner(t, t))
    _same(kiln.inner(kiln.tensor(2.0), x), torch.inner(torch.tensor(2.0), t))
    _same(kiln.dist(x, x * 2, 3), torch.dist(t, t * 2, 3), rtol=1e-6)


@pytest.mark.parametrize("name,args", [("unsqueeze_", (0,)), ("squeeze_", ()), ("t_", ()),
                                       ("transpose_", (0, 1)), ("swapdims_", (1, 0)),
                                       ("swapaxes_", (0, 1)), ("as_strided_", ((2,), (2,)))])
def test_in_place_view_methods(name, args):
    x = np.arange(6.0).reshape(2, 3) if name != "squeeze_" else np.arange(6.0).reshape(2, 1, 3)
    ours, theirs = _k(x.copy()), _t(x.copy())
    row = ours[0]  # a view taken before keeps its own shape, as in torch
    assert getattr(ours, name)(*args) is ours
    getattr(theirs, name)(*args)
    _same(ours, theirs)
    assert tuple(ours.stride()) == tuple(theirs.stride())
    assert row.dim() == x[0].ndim


def test_in_place_view_methods_and_autograd():
    leaf = kiln.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.t_()
    with pytest.raises(NotImplementedError, match="out-of-place form"):
        (leaf * 2).t_()
    with kiln.no_grad():
        assert tuple(leaf.t_().shape) == (3, 2)


def test_resize():
    x = kiln.arange(6.0)
    x.resize_(2, 2)
    assert x.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    x.resize_as_(kiln.zeros(3, 3))
    assert tuple(x.shape) == (3, 3) and x[0].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(RuntimeError, match="negative dimension"):
        x.resize_(-1)


def test_lgamma_exact_zeros_keep_their_gradient():
    y = kiln.tensor([1.0, 2.0, 3.0], dtype=kiln.float64, requires_grad=True)
    out = kiln.lgamma(y)
    assert out.tolist()[:2] == [0.0, 0.0]
    out.sum().backward()
    t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    torch.lgamma(t).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), t.grad.numpy(), rtol=1e-10)


def test_bce_with_logits_gradient_at_zero_logits():
    """The softplus term was abs + relu, both with a zero slope at 0: the gradient there was 0."""
    x = np.array([0.0, 0.5, -1.0, 30.0, -30.0])
    t = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
    k, tt = _k(x).requires_grad_(), _t(x).requires_grad_()
    kiln.nn.functional.binary_cross_entropy_with_logits(
        k, _k(t), pos_weight=kiln.tensor(2.0, dtype=kiln.float64)).backward()
    torch.nn.functional.binary_cross_entropy_with_logits(
        tt, _t(t), pos_weight=torch.tensor(2.0, dtype=torch.float64)).backward()
    np.testing.assert_allclose(k.grad.numpy(), tt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window",
                                  "bartlett_window", "kaiser_window"])  # fmt: skip
@pytest.mark.parametrize("length,periodic", [(5, True), (5, False), (8, True), (1, True),
                                             (0, True)])  # fmt: skip
def test_window_functions(name, length, periodic):
    ours, theirs = getattr(kiln, name)(length, periodic), getattr(torch, name)(length, periodic)
    _same(ours, theirs, atol=1e-6)
    _same(getattr(kiln, name)(length, periodic, dtype=kiln.float64),
          getattr(torch, name)(length, periodic, dtype=torch.float64), atol=1e-12)


def test_torch_level_names_of_functional_ops():
    x = np.random.default_rng(7).normal(size=(5, 3))
    _same(kiln.pdist(_k(x)), torch.pdist(_t(x)), rtol=1e-12)
    _same(kiln.pdist(_k(x), 1), torch.pdist(_t(x), 1), rtol=1e-12)
    weight, index = x, np.array([1, 2, 0, 2])
    _same(kiln.embedding(_k(weight), _k(index)), torch.embedding(_t(weight), _t(index)))
    _same(kiln.cosine_similarity(_k(x), _k(x[::-1].copy())),
          torch.cosine_similarity(_t(x), _t(x[::-1].copy())), rtol=1e-12)
    y = np.arange(16.0).reshape(1, 4, 2, 2)
    _same(kiln.pixel_shuffle(_k(y), 2), torch.pixel_shuffle(_t(y), 2))
    z = _k(x.copy())
    assert kiln.sigmoid_(z) is z
    _same(z, torch.sigmoid(_t(x)), rtol=1e-12)
    with pytest.raises(RuntimeError, match="pdist only supports 2D tensors"):
        kiln.pdist(kiln.zeros(2))


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window"])
def test_window_functions_compile_whole_and_honor_requires_grad(name):
    from kiln._capture.backend_compiled import CpuBackend

    def spectrum_weights(x):
        return x * getattr(kiln, name)(x.shape[-1])

    x = kiln.randn(2, 8)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(spectrum_weights, backend=backend)(x)
    _same(got, torch.from_numpy(spectrum_weights(x).numpy()), atol=1e-6)
    assert [r.eager_nodes for r in backend.reports] == [0]
    assert getattr(kiln, name)(4, requires_grad=True).requires_grad
    assert not getattr(kiln, name)(4).requires_grad
