"""kiln.autocast against torch.autocast on the CPU: which ops run in the narrow type and which
in float32, the values (same casts, so equal results), gradients in each input's own dtype,
nesting, enabled=False, the decorator form, per-thread state, float64 left alone, and the
errors and warnings of bad arguments."""

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

TF, KF = torch.nn.functional, kiln.nn.functional


def arrays(*shapes, seed=0):
    g = np.random.default_rng(seed)
    return [g.standard_normal(s).astype(np.float32) for s in shapes]


def run_both(fn_t, fn_k, shapes, dtype="bfloat16"):
    arrs = arrays(*shapes)
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        t = fn_t(*[torch.tensor(a) for a in arrs])
    with kiln.autocast("cpu", dtype=getattr(kiln, dtype)):
        k = fn_k(*[kiln.tensor(a) for a in arrs])
    return t, k


TARGETS = np.array([0, 1, 2, 3, 0, 1, 2, 3])
CASES = {
    "matmul": (lambda a, b: a @ b, [(8, 16), (16, 4)]),
    "linear": (lambda a, b: F(a).linear(a, b), [(8, 16), (4, 16)]),
    "bmm": (lambda a, b: M(a).bmm(a, b), [(2, 3, 4), (2, 4, 5)]),
    "baddbmm": (lambda s, a, b: M(a).baddbmm(s, a, b), [(2, 3, 5), (2, 3, 4), (2, 4, 5)]),
    "addmm": (lambda s, a, b: M(a).addmm(s, a, b), [(3, 5), (3, 4), (4, 5)]),
    "mv": (lambda a, b: M(a).mv(a, b), [(3, 4), (4,)]),
    "einsum": (lambda a, b: M(a).einsum("bij,bjk->bik", a, b), [(2, 3, 4), (2, 4, 5)]),
    "conv2d": (lambda x, w: F(x).conv2d(x, w, padding=1), [(1, 3, 6, 6), (4, 3, 3, 3)]),
    "conv1d": (lambda x, w: F(x).conv1d(x, w), [(2, 3, 7), (4, 3, 3)]),
    "conv_transpose2d": (lambda x, w: F(x).conv_transpose2d(x, w, stride=2),
                         [(1, 3, 4, 4), (3, 2, 2, 2)]),
    "sdpa": (lambda q, k, v: F(q).scaled_dot_product_attention(q, k, v, is_causal=True),
             [(1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)]),
    # float32 list
    "cross_entropy": (lambda a, b: F(a).cross_entropy(a @ b, M(a).tensor(TARGETS)),
                      [(8, 16), (16, 4)]),
    "mse_loss": (lambda a, b: F(a).mse_loss(a @ b, a[:, :4]), [(8, 16), (16, 4)]),
    "l1_loss": (lambda a, b: F(a).l1_loss(a @ b, a[:, :4]), [(8, 16), (16, 4)]),
    "bce_with_logits": (lambda a, b: F(a).binary_cross_entropy_with_logits(a @ b,
                                                                           (a[:, :4] > 0) * 1.0),
                        [(8, 16), (16, 4)]),
    "prod": (lambda a, b: (a @ b).prod(), [(2, 3), (3, 2)]),
    # untouched: the narrow result flows on (CPU autocast keeps softmax and layer_norm narrow)
    "softmax_after": (lambda a, b: (a @ b).softmax(-1), [(8, 16), (16, 4)]),
    "layer_norm_after": (lambda a, b: F(a).layer_norm(a @ b, (4,)), [(8, 16), (16, 4)]),
    "add": (lambda a, b: a + b, [(3, 4), (3, 4)]),
}


def M(t):
    return torch if isinstance(t, torch.Tensor) else kiln


def F(t):
    return TF if isinstance(t, torch.Tensor) else KF


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_lists_match_torch(name, dtype):
    fn, shapes = CASES[name]
    t, k = run_both(fn, fn, shapes, dtype)
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], (k.dtype, t.dtype)
    tol = 2e-2 if t.dtype != torch.float32 else 1e-2
    np.testing.assert_allclose(k.float().numpy(), t.float().numpy(), rtol=tol, atol=tol)


def test_training_step_gradients_keep_the_parameter_dtype():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    km = kiln.nn.Sequential(kiln.nn.Linear(16, 32), kiln.nn.GELU(), kiln.nn.Linear(32, 4))
    for (_, tp), (_, kp) in zip(tm.named_parameters(), km.named_parameters(), strict=True):
        kp.data.copy_(kiln.tensor(tp.detach().numpy()))
    (x,) = arrays((8, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_t = tm(torch.tensor(x))
        loss_t = TF.cross_entropy(out_t, torch.tensor(TARGETS))
    with kiln.autocast("cpu", dtype=kiln.bfloat16):
        out_k = km(kiln.tensor(x))
        loss_k = KF.cross_entropy(out_k, kiln.tensor(TARGETS))
    assert out_k.dtype == kiln.bfloat16 and loss_k.dtype == kiln.float32
    loss_t.backward()
    loss_k.backward()
    np.testing.assert_allclose(loss_k.item(), loss_t.item(), rtol=1e-3)
    for (name, tp), (_, kp) in zip(tm.named_parameters(), km.named_parameters(), strict=True):
        assert kp.grad.dtype == kiln.float32, name
        np.testing.assert_allclose(kp.grad.numpy(), tp.grad.numpy(), rtol=5e-2, atol=5e-3,
                                   err_msg=name)


def test_regions_nest_disable_and_restore():
    a, b = kiln.ones(2, 3), kiln.ones(3, 2)
    assert not kiln.is_autocast_enabled("cpu")
    with kiln.autocast("cpu"):
        assert kiln.is_autocast_enabled("cpu") and kiln.get_autocast_dtype("cpu") == kiln.bfloat16
        assert (a @ b).dtype == kiln.bfloat16
        with kiln.autocast("cpu", enabled=False):
            assert (a @ b).dtype == kiln.float32 and not kiln.is_autocast_cpu_enabled()
        with kiln.amp.autocast("cpu", dtype=kiln.float16):
            assert (a @ b).dtype == kiln.float16
        assert (a @ b).dtype == kiln.bfloat16
    assert not kiln.is_autocast_enabled("cpu") and (a @ b).dtype == kiln.float32
    with pytest.raises(ValueError, match="boom"), kiln.autocast("cpu"):
        raise ValueError("boom")
    assert not kiln.is_autocast_enabled("cpu")  # restored on an exception too


def test_decorator_form_and_float64():
    @kiln.autocast("cpu", dtype=kiln.bfloat16)
    def product(x, y):
        return x @ y

    assert product(kiln.ones(2, 3), kiln.ones(3, 2)).dtype == kiln.bfloat16
    assert product(kiln.ones(2, 3, dtype=kiln.float64), kiln.ones(3, 2, dtype=kiln.float64)
                   ).dtype == kiln.float64  # torch leaves float64 alone
    assert not kiln.is_autocast_enabled("cpu")


def test_state_is_per_thread():
    seen = []
    with kiln.autocast("cpu"):
        t = threading.Thread(target=lambda: seen.append(kiln.is_autocast_enabled("cpu")))
        t.start()
        t.join()
    assert seen == [False]


def test_backward_inside_a_region_does_not_recast():
    w = kiln.ones(3, 2, requires_grad=True)
    with kiln.autocast("cpu"):
        (kiln.ones(4, 3) @ w).float().sum().backward()
    assert w.grad.dtype == kiln.float32
    np.testing.assert_allclose(w.grad.numpy(), np.full((3, 2), 4.0))


def test_bad_arguments():
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'xpu'"):
        kiln.autocast("xpu")
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        kiln.autocast(0)
    with pytest.warns(UserWarning, match="target dtype is not supported. Disabling autocast"):
        region = kiln.autocast("cpu", dtype=kiln.float64)
    with region:
        assert (kiln.ones(2, 2) @ kiln.ones(2, 2)).dtype == kiln.float32
    assert kiln.amp.is_autocast_available("cpu") and not kiln.amp.is_autocast_available("xpu")


def _norm_net(m):
    nn = m.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * 6 * 6, 16), nn.LayerNorm(16),
                         nn.Linear(16, 4))


def test_norm_layers_on_narrow_inputs_give_float32_parameter_gradients():
    """BatchNorm and LayerNorm after an autocast product see bfloat16 inputs with float32
    parameters: every parameter's gradient is float32 and near torch's."""
    torch.manual_seed(0)
    tm, km = _norm_net(torch), _norm_net(kiln)
    km.load_state_dict({k: kiln.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    (x,) = arrays((4, 3, 6, 6))
    y = np.array([0, 1, 2, 3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lt = TF.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
    with kiln.autocast("cpu", dtype=kiln.bfloat16):
        lk = KF.cross_entropy(km(kiln.tensor(x)), kiln.tensor(y))
    lt.backward()
    lk.backward()
    np.testing.assert_allclose(lk.item(), lt.item(), rtol=2e-2)
    for (name, tp), (_, kp) in zip(tm.named_parameters(), km.named_parameters(), strict=True):
        assert kp.grad.dtype == kiln.float32, name
        np.testing.assert_allclose(kp.grad.numpy(), tp.grad.numpy(), rtol=0.1, atol=2e-2,
                                   err_msg=name)
