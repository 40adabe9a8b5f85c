"""The autograd engine and its Python API against torch's semantics: recording, accumulation,
retain_graph, create_graph, hooks, retain_grad, autograd.grad, grad mode and the error cases."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402


def leaf(values, lib=kiln):
    return lib.tensor(values, dtype=lib.float64, requires_grad=True)


def test_requires_grad_propagates_and_leaves():
    w = leaf([1.0, 2.0])
    x = kiln.tensor([3.0, 4.0])
    y = w * x
    assert y.requires_grad and not y.is_leaf and y.grad_fn is not None
    assert w.is_leaf and x.is_leaf and w.grad_fn is None
    assert not (x * 2).requires_grad
    lin = kiln.nn.Linear(3, 2)
    assert lin(kiln.randn(4, 3)).requires_grad


def test_grad_fn_names_and_next_functions():
    a, b = leaf([1.0]), leaf([2.0])
    y = (a * b).exp()
    assert y.grad_fn.name() == "ExpBackward0"
    ((mul, _),) = y.grad_fn.next_functions
    assert mul.name() == "MulBackward0"
    acc = mul.next_functions[0][0]
    assert acc.name() == "AccumulateGrad" and acc.variable.data_ptr() == a.data_ptr()


def test_accumulates_across_backward_calls_and_zero_grad():
    w = leaf([1.0, -2.0])
    for _ in range(2):
        (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [4.0, -8.0])
    m = kiln.nn.Linear(2, 1)
    m(kiln.ones(1, 2)).sum().backward()
    assert m.weight.grad is not None
    m.zero_grad()
    assert m.weight.grad is None
    m(kiln.ones(1, 2)).sum().backward()
    m.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(m.weight.grad.numpy(), 0.0)


def test_shared_subexpression_sums_gradients():
    x = leaf([0.5, 1.5])
    y = x.sin()
    z = (y * y + y.exp()).sum()
    z.backward()
    tx = leaf([0.5, 1.5], torch)
    ty = tx.sin()
    (ty * ty + ty.exp()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_second_backward_needs_retain_graph():
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_backward_errors():
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        kiln.ones(2).sum().backward()
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(kiln.ones(3, dtype=kiln.float64))
    (x * 2).backward(kiln.tensor([1.0, 3.0], dtype=kiln.float64))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 6.0])


def test_autograd_grad_leaves_dot_grad_alone_and_allow_unused():
    x, y = leaf([1.0, 2.0]), leaf([3.0])
    (gx,) = kiln.autograd.grad((x * x).sum(), x)
    np.testing.assert_allclose(gx.numpy(), [2.0, 4.0])
    assert x.grad is None
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        kiln.autograd.grad((x * 2).sum(), [x, y])
    gx, gy = kiln.autograd.grad((x * 2).sum(), [x, y], allow_unused=True)
    assert gy is None
    gx, gy = kiln.autograd.grad((x * 2).sum(), [x, y], materialize_grads=True)
    np.testing.assert_array_equal(gy.numpy(), [0.0])


def test_grad_of_intermediate():
    x = leaf([1.0, 2.0])
    h = x * 3
    (gh,) = kiln.autograd.grad((h * h).sum(), h)
    np.testing.assert_allclose(gh.numpy(), [6.0, 12.0])


def test_double_backward_matches_torch():
    def f(lib, x):
        return (x.tanh() * x.sigmoid() + x**3).sum()

    for lib in (kiln, torch):
        x = leaf([0.3, -1.2, 2.0], lib)
        (g,) = lib.autograd.grad(f(lib, x), x, create_graph=True)
        assert g.requires_grad
        (gg,) = lib.autograd.grad(g.sum(), x)
        if lib is kiln:
            kg, kgg = g.detach().numpy(), gg.numpy()
        else:
            np.testing.assert_allclose(kg, g.detach().numpy(), rtol=1e-12)
            np.testing.assert_allclose(kgg, gg.numpy(), rtol=1e-12)


def test_hooks_and_retain_grad():
    x = leaf([1.0, 2.0])
    seen = []
    h = x * 2
    h.retain_grad()
    handle = h.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 10)
    x.register_hook(lambda g: g + 1)
    (h * h).sum().backward()
    np.testing.assert_allclose(seen[0], [4.0, 8.0])
    np.testing.assert_allclose(h.grad.numpy(), [40.0, 80.0])  # retain_grad sees the hooked grad
    np.testing.assert_allclose(x.grad.numpy(), [81.0, 161.0])
    handle.remove()
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't"):
        kiln.ones(1).register_hook(lambda g: g)


def test_grad_setter_and_detach():
    x = leaf([1.0, 2.0])
    x.grad = kiln.tensor([5.0, 6.0], dtype=kiln.float64)
    (x * 1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 7.0])
    x.grad = None
    assert x.grad is None
    with pytest.raises(RuntimeError, match="different size"):
        x.grad = kiln.ones(3, dtype=kiln.float64)
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None
    y = x * 2
    y.detach_()
    assert y.grad_fn is None and not y.requires_grad


def test_requires_grad_flag_rules():
    y = leaf([1.0]) * 2
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
        y.requires_grad = False
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.tensor([1, 2]).requires_grad_()


def test_no_grad_enable_grad_and_inference_mode():
    x = leaf([1.0])
    with kiln.no_grad():
        assert not (x * 2).requires_grad
        with kiln.enable_grad():
            assert (x * 2).requires_grad
    with kiln.inference_mode():
        assert not (x * 2).requires_grad
    with kiln.set_grad_enabled(False):
        assert not x.exp().requires_grad
    assert x.exp().requires_grad


def test_inplace_rules():
    w = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad is being used in an"):
        w.add_(1)
    with kiln.no_grad():
        w.add_(1)  # optimizers update leaves this way
    np.testing.assert_allclose(w.detach().numpy(), [2.0, 3.0])
    # In place on a non-leaf records: the new history flows to w.
    h = w * 1
    h.mul_(3)
    h.relu_()
    h.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 3.0])


def test_saved_tensor_modified_in_place_raises():
    x = leaf([0.5, 1.0])
    y = x.sigmoid()
    z = y.sum()
    with kiln.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_inplace_with_saved_self_is_correct():
    # mul_ saves self's old value for other's gradient: torch clones it, so must kiln.
    for lib in (kiln, torch):
        a, b = leaf([1.0, 2.0], lib), leaf([3.0, 4.0], lib)
        h = a * 1
        h.mul_(b)
        (h * h).sum().backward()
        if lib is kiln:
            ka, kb = a.grad.numpy(), b.grad.numpy()
    np.testing.assert_allclose(ka, a.grad.numpy())
    np.testing.assert_allclose(kb, b.grad.numpy())


def test_copy_and_fill_on_tracked_tensors():
    src = leaf([1.0, 2.0])
    dst = kiln.zeros(2, dtype=kiln.float64)
    dst.copy_(src * 3)
    assert dst.requires_grad
    (dst * dst).sum().backward()
    np.testing.assert_allclose(src.grad.numpy(), [18.0, 36.0])
    h = src * 1
    h.zero_()
    assert h.requires_grad


def test_dropout_mask_is_reused_by_backward():
    kiln.manual_seed(3)
    x = leaf(np.ones((64, 8)).tolist())
    y = kiln.nn.functional.dropout(x, 0.5)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())
    kiln.manual_seed(3)
    ref = kiln.nn.functional.dropout(kiln.ones(64, 8, dtype=kiln.float64), 0.5)
    np.testing.assert_array_equal(ref.numpy(), y.detach().numpy())


def test_custom_function():
    class Cube(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.save_for_backward(x)
            ctx.k = k
            return x**3 * k

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            assert ctx.needs_input_grad == (True, False)
            return g * 3 * x * x * ctx.k, None

    x = leaf([1.0, 2.0])
    y = Cube.apply(x, 2.0)
    assert y.grad_fn.name() == "CubeBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 24.0])
    assert kiln.autograd.gradcheck(lambda t: Cube.apply(t, 1.5), (leaf([0.3, -0.7]),))


def test_gradcheck_and_gradgradcheck():
    x = leaf(np.random.default_rng(0).standard_normal((2, 3)).tolist())
    assert kiln.autograd.gradcheck(lambda t: (t.tanh() @ t.t()).softmax(-1), (x,))
    assert kiln.autograd.gradgradcheck(lambda t: (t.sin() * t).sum(1), (x,))

    class Wrong(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            return g * 3

    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        kiln.autograd.gradcheck(Wrong.apply, (x,))
    assert not kiln.autograd.gradcheck(Wrong.apply, (x,), raise_exception=False)


def test_views_share_history_and_inplace_through_a_view_rewrites_the_base():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    v = x.t()[0]
    (v * v).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[2.0, 0.0], [6.0, 0.0]])
    x.grad = None
    h = x * 1
    h[0].mul_(2)
    assert h.grad_fn.name() == "CopySlices"
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[2.0, 2.0], [1.0, 1.0]])


def test_weight_of_class_losses_must_be_constant():
    x = leaf([[0.1, 0.2]])
    with pytest.raises(RuntimeError, match="not differentiable with respect to argument 'weight'"):
        kiln.nn.functional.cross_entropy(x, kiln.tensor([1]), weight=leaf([1.0, 2.0]))
