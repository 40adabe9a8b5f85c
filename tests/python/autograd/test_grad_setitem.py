"""In-place writes through views with autograd (torch's CopySlices): item assignment, in-place ops
on slices, index_put_, and the stale histories of other views, against torch's gradients."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 5))
W = RNG.standard_normal(5)


def _grads(program, dtype="float64"):
    """Runs program(lib, x, w) in kiln and torch; returns (kiln grads, torch grads)."""
    out = []
    for lib in (kiln, torch):
        x = lib.tensor(X, dtype=getattr(lib, dtype), requires_grad=True)
        w = lib.tensor(W, dtype=getattr(lib, dtype), requires_grad=True)
        loss = program(lib, x, w)
        loss.backward()
        grads = [t.grad for t in (x, w)]
        out.append([None if g is None else np.asarray(g.detach().numpy()) for g in grads])
    return out


def _check(program, dtype="float64"):
    ours, theirs = _grads(program, dtype)
    for a, b in zip(ours, theirs, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_item_assignment_of_rows_columns_and_scalars():
    def program(lib, x, w):
        y = x * 2
        y[1] = w * 3
        y[:, 2] = 0.5
        y[3, 1:4] = w[:3].exp()
        return (y * y).sum()

    _check(program)


def test_assignment_into_a_constant_buffer_makes_it_require_grad():
    def program(lib, x, w):
        buf = lib.zeros(4, 5, dtype=x.dtype)
        buf[2] = w
        buf[0, 1:3] = w[:2] * x[0, :2]
        assert buf.requires_grad and buf.grad_fn.name().endswith("CopySlices")
        return buf.sin().sum()

    _check(program)


def test_advanced_and_masked_assignment():
    def program(lib, x, w):
        y = x * 1
        y[lib.tensor([0, 2])] = w
        y[y > 0.5] = 0.0
        y[lib.tensor([1, 3]), lib.tensor([0, 4])] = w[:2]
        y[:, lib.tensor([1])] = x[:, :1] * 5
        return (y**2).sum()

    _check(program)


def test_assigned_value_broadcasts_and_casts():
    def program(lib, x, w):
        y = x.float() * 1
        y[1:3] = w[None, :]  # leading size-1 dims dropped, then broadcast over the rows
        y[0] = w.sum()  # a 0-d tensor fills the row
        return (y * y).sum()

    _check(program)


def test_inplace_ops_on_slices_rewrite_the_base():
    def program(lib, x, w):
        y = x.clone()
        y[:, 1:].mul_(3)
        y[0].add_(w)
        y[:, 1] += x[:, 0]
        y.diagonal().zero_()
        return (y.tanh() * x).sum()

    _check(program)


def test_index_put_in_place_with_and_without_accumulate():
    def program(lib, x, w):
        y = x * 1
        y.index_put_((lib.tensor([1, 1]), lib.tensor([0, 3])), w[:2], accumulate=True)
        y.index_put_((lib.tensor([2]),), w)
        return (y**2).sum()

    _check(program)
    y = kiln.index_put(kiln.zeros(3), (kiln.tensor([0, 2]),), kiln.ones(2, requires_grad=True))
    assert y.grad_fn.name() == "IndexPutBackward0"


def test_an_older_view_sees_the_write_through_another():
    def program(lib, x, w):
        y = x * 1
        row = y[1]  # made before the write below
        y[1, 2:] = w[:3]
        if lib is kiln:  # torch replays the select; kiln cuts the region of the new base
            assert row.grad_fn.name() == "AsStridedBackward0"
        return (row * row).sum() + y.sum()

    _check(program)


def test_view_of_a_view_writes_reach_the_root():
    def program(lib, x, w):
        y = x * 1
        inner = y.t()[2]
        inner[1:3] = w[:2] * 4
        return (y.exp()).sum() + (inner * 2).sum()

    _check(program)


def test_setitem_in_float32_matches_torch():
    def program(lib, x, w):
        y = x.relu() * 1
        y[..., -1] = w[:4]
        return y.softmax(-1).log().sum()

    _check(program, "float32")


def test_gradcheck_through_copy_slices():
    def f(x, w):
        y = x * 1.5
        y[1:3, ::2] = w[:3] * w[:3]
        y[0] += x[3]
        return y.cos()

    x = kiln.tensor(X, dtype=kiln.float64, requires_grad=True)
    w = kiln.tensor(W, dtype=kiln.float64, requires_grad=True)
    assert kiln.autograd.gradcheck(f, (x, w))


def test_writes_into_views_of_leaves_refuse_in_torch_words():
    x = kiln.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x[0] = 2.0
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x[:2].mul_(2)
    with kiln.no_grad():  # as torch: without grad mode the write is fine
        x[0] = 2.0
    assert x.detach().numpy().tolist() == [2.0, 1.0, 1.0]


def test_saved_tensors_overwritten_through_a_view_are_detected():
    x = kiln.ones(3, requires_grad=True)
    y = x.exp()  # saves its output
    y[0] = 5.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def _second_order(lib, x, w):
    """Gradients of gradients through writes into views: rows, strided and transposed slices,
    an in-place op on a slice, and a stale older view."""
    y = x * x
    y[0] = x[1] * 3
    y[1:3, ::2] = w[:3] * w[:3]
    z = y.t()
    z[1:, 0] *= w[1:]
    older = y[:, 1]
    y[2] = (x[2] * w).sin()
    loss = (y * y).sum() + (older * x[:, 0]).sum()
    gx, gw = lib.autograd.grad(loss, (x, w), create_graph=True)
    return (gx * gx).sum() + (gw.cos() * x[0]).sum()


def test_double_backward_through_copy_slices_equals_torch():
    got, want = [], []
    for lib, out in ((kiln, got), (torch, want)):
        x = lib.tensor(X, dtype=lib.float64, requires_grad=True)
        w = lib.tensor(W, dtype=lib.float64, requires_grad=True)
        out.extend(lib.autograd.grad(_second_order(lib, x, w), (x, w)))
    for g, t in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_gradgradcheck_through_copy_slices():
    def f(x, w):
        y = x * 1.5
        y[1:3, ::2] = w[:3] * w[:3]
        y.t()[0] += x[3, :4]  # a column of the base, written through a transposed view
        return y.cos()

    x = kiln.tensor(X, dtype=kiln.float64, requires_grad=True)
    w = kiln.tensor(W, dtype=kiln.float64, requires_grad=True)
    assert kiln.autograd.gradgradcheck(f, (x, w))


def test_write_into_a_view_of_a_sliced_base_refuses():
    w = kiln.ones(2, requires_grad=True)
    base = kiln.zeros(4, 6)[:, ::2]  # not dense: its gradient region can't be cut
    with pytest.raises(NotImplementedError, match="is not dense"):
        base[0, :2] = w


def test_split_pieces_have_one_backward_and_refuse_writes_as_torch():
    def program(lib, x, w):
        y = x * 1
        a, b, c = y.split([2, 2, 1], dim=1)
        unused, used = x.chunk(2, 0)
        return (a.exp() * 2).sum() + (c**2).sum() + used.sum() + (b * w[:2]).sum()

    _check(program)
    a, b = (kiln.ones(4, requires_grad=True) * 1).split(2)
    assert a.grad_fn.name() == "SplitBackward0"
    with pytest.raises(RuntimeError, match="Output 1 of Split is a view and is being modified"):
        b.mul_(2)
    with pytest.raises(RuntimeError, match="output of a function that returns multiple views"):
        a[0] = 1.0
