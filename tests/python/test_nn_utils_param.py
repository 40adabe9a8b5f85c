"""kiln.nn.utils parametrize / parametrizations / weight_norm / spectral_norm / fusion /
skip_init / stateless against torch.nn.utils on the same modules and weights."""

import copy
import warnings

import pytest
import torch
from conftest import assert_close, to_kiln
from models.helpers import copy_state, pair

import kiln
import kiln.nn as knn
from kiln.nn.utils import parametrizations as kparams
from kiln.nn.utils import parametrize as kP

tparams = torch.nn.utils.parametrizations
tP = torch.nn.utils.parametrize

TOL = {"atol": 1e-10, "rtol": 1e-10}


def inputs(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=g, dtype=torch.float64)
    return t, to_kiln(t)


def names(module):
    return [n for n, _ in module.named_parameters()]


def keys(module):
    return list(module.state_dict().keys())


def to_torch_detached(k):
    return torch.from_numpy(k.detach().numpy().copy())


def check_forward_backward(tm, km, t_x, k_x, tol=TOL):
    """Same output, and the same gradients on every (equally named) parameter."""
    t_out, k_out = tm(t_x), km(k_x)
    assert_close(k_out, t_out.detach(), **tol)
    t_out.square().sum().backward()
    k_out.square().sum().backward()
    t_params, k_params = dict(tm.named_parameters()), dict(km.named_parameters())
    assert list(k_params) == list(t_params)
    for name, tp in t_params.items():
        if tp.grad is None:
            assert k_params[name].grad is None, name
        else:
            assert_close(k_params[name].grad, tp.grad, **tol)


# --------------------------------------------------------------------------------- parametrize


class TSym(torch.nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).mT

    def right_inverse(self, x):
        return x.triu()


class KSym(knn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).mT

    def right_inverse(self, x):
        return x.triu()


class TScale(torch.nn.Module):
    def forward(self, x):
        return 3.0 * x

    def right_inverse(self, x):
        return x / 3.0


class KScale(knn.Module):
    calls = 0

    def forward(self, x):
        KScale.calls += 1
        return 3.0 * x

    def right_inverse(self, x):
        return x / 3.0


class TSum(torch.nn.Module):
    def forward(self, a, b):
        return a + 2.0 * b

    def right_inverse(self, x):
        return x / 3.0, x / 3.0


class KSum(knn.Module):
    def forward(self, a, b):
        return a + 2.0 * b

    def right_inverse(self, x):
        return x / 3.0, x / 3.0


def test_register_parametrization_matches_torch():
    tm, km = pair("Linear", 4, 4, dtype="float64")
    tP.register_parametrization(tm, "weight", TSym())
    kP.register_parametrization(km, "weight", KSym())
    assert type(km).__name__ == "ParametrizedLinear" == type(tm).__name__
    assert isinstance(km, knn.Linear)
    assert kP.type_before_parametrizations(km) is knn.Linear
    assert kP.is_parametrized(km) and kP.is_parametrized(km, "weight")
    assert not kP.is_parametrized(km, "bias")
    assert isinstance(km.parametrizations.weight, kP.ParametrizationList)
    assert names(km) == names(tm) == ["bias", "parametrizations.weight.original"]
    assert keys(km) == keys(tm)
    assert repr(km) == repr(tm).replace("TSym", "KSym")
    assert_close(km.weight, tm.weight.detach(), **TOL)
    t_x, k_x = inputs(3, 4)
    check_forward_backward(tm, km, t_x, k_x)
    # Other instances of the class are untouched.
    assert type(knn.Linear(2, 2)) is knn.Linear


def test_parametrized_attribute_is_recomputed_on_access():
    km = knn.Linear(3, 3)
    kP.register_parametrization(km, "weight", KSym())
    with kiln.no_grad():
        km.parametrizations.weight.original.fill_(1.0)
    assert km.weight.sum().item() == 9.0
    with kiln.no_grad():
        km.parametrizations.weight.original.zero_()
    assert km.weight.sum().item() == 0.0


def test_chained_parametrizations_and_assignment():
    tm, km = pair("Linear", 3, 3, dtype="float64")
    for m, P, sym, scale in ((tm, tP, TSym, TScale), (km, kP, KSym, KScale)):
        P.register_parametrization(m, "weight", scale())
        P.register_parametrization(m, "weight", sym())
        assert len(m.parametrizations.weight) == 2
    assert_close(km.weight, tm.weight.detach(), **TOL)
    # Assigning runs the right_inverses, last registered first; the original keeps its id.
    k_orig = km.parametrizations.weight.original
    target_t, target_k = inputs(3, 3, seed=1)
    with torch.no_grad():
        tm.weight = target_t
    km.weight = target_k
    assert km.parametrizations.weight.original is k_orig
    assert_close(km.parametrizations.weight.original, tm.parametrizations.weight.original, **TOL)
    check_forward_backward(tm, km, *inputs(2, 3))


def test_right_inverse_returning_a_tuple():
    tm, km = pair("Linear", 3, 2, dtype="float64")
    tP.register_parametrization(tm, "weight", TSum())
    kP.register_parametrization(km, "weight", KSum())
    expected = ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert names(km) == names(tm) == expected
    assert keys(km) == keys(tm)
    assert isinstance(km.parametrizations.weight.original0, knn.Parameter)
    assert_close(km.weight, tm.weight.detach(), **TOL)
    check_forward_backward(tm, km, *inputs(4, 3))
    with pytest.raises(ValueError, match="sequence of tensors"):
        kP.remove_parametrizations(km, "weight", leave_parametrized=False)
    tP.remove_parametrizations(tm, "weight")
    kP.remove_parametrizations(km, "weight")
    assert type(km) is knn.Linear
    assert isinstance(km.weight, knn.Parameter) and km.weight.requires_grad
    assert names(km) == names(tm) == ["bias", "weight"]
    assert_close(km.weight, tm.weight.detach(), **TOL)


@pytest.mark.parametrize("leave", [True, False])
def test_remove_parametrizations(leave):
    tm, km = pair("Linear", 3, 3, dtype="float64")
    tP.register_parametrization(tm, "weight", TScale())
    kP.register_parametrization(km, "weight", KScale())
    k_orig = km.parametrizations.weight.original
    tP.remove_parametrizations(tm, "weight", leave_parametrized=leave)
    kP.remove_parametrizations(km, "weight", leave_parametrized=leave)
    assert type(km) is knn.Linear and not kP.is_parametrized(km)
    assert not hasattr(km, "parametrizations")
    # The parameter object survives (an optimizer holding it keeps working).
    assert km.weight is k_orig
    assert names(km) == names(tm) and keys(km) == keys(tm)
    assert_close(km.weight, tm.weight.detach(), **TOL)
    check_forward_backward(tm, km, *inputs(2, 3))
    with pytest.raises(ValueError, match="does not have a parametrization"):
        kP.remove_parametrizations(km, "weight")


def test_remove_one_of_two_keeps_class():
    km = knn.Linear(3, 3)
    kP.register_parametrization(km, "weight", KScale())
    kP.register_parametrization(km, "bias", KScale())
    kP.remove_parametrizations(km, "weight")
    assert type(km).__name__ == "ParametrizedLinear" and kP.is_parametrized(km, "bias")
    kP.remove_parametrizations(km, "bias")
    assert type(km) is knn.Linear


def test_parametrize_buffer_and_unsafe():
    km = knn.BatchNorm1d(3)
    kP.register_parametrization(km, "running_var", KScale())
    assert "parametrizations.running_var.original" in keys(km)
    assert not isinstance(km.parametrizations.running_var.original, knn.Parameter)
    assert_close(km.parametrizations.running_var.original, torch.full((3,), 1.0 / 3.0))
    assert_close(km.running_var, torch.ones(3))

    class Repeat(knn.Module):
        def forward(self, x):
            return kiln.cat([x, x])

    with pytest.raises(ValueError, match="may not change the shape"):
        kP.register_parametrization(knn.Linear(2, 2), "bias", Repeat())
    m = kP.register_parametrization(knn.Linear(2, 2), "bias", Repeat(), unsafe=True)
    assert m.bias.shape == (4,)
    with pytest.raises(ValueError, match="does not have a parameter"):
        kP.register_parametrization(knn.Linear(2, 2), "nope", KScale())


def test_cached():
    km = knn.Linear(3, 3)
    kP.register_parametrization(km, "weight", KScale())
    KScale.calls = 0
    _ = km.weight, km.weight
    assert KScale.calls == 2
    with kP.cached():
        w1, w2 = km.weight, km.weight
        with kP.cached():
            w3 = km.weight
    assert w1 is w2 is w3 and KScale.calls == 3
    _ = km.weight
    assert KScale.calls == 4


def test_parametrized_deepcopy_state_dict_and_pickle():
    km = knn.Linear(3, 3)
    kP.register_parametrization(km, "weight", KScale())
    clone = copy.deepcopy(km)
    assert type(clone) is type(km)
    assert_close(clone.weight, to_torch_detached(km.weight))
    other = knn.Linear(3, 3)
    kP.register_parametrization(other, "weight", KScale())
    other.load_state_dict(km.state_dict())
    assert_close(other.weight, to_torch_detached(km.weight))
    with pytest.raises(RuntimeError, match="only supported through state_dict"):
        km.__getstate__()


def test_transfer_parametrizations_and_params():
    src, dst = knn.Linear(3, 3), knn.Linear(3, 3)
    kP.register_parametrization(src, "weight", KScale())
    kP.transfer_parametrizations_and_params(src, dst)
    assert dst.parametrizations.weight.original is src.parametrizations.weight.original
    assert_close(dst.weight, to_torch_detached(src.weight))


# ---------------------------------------------------------------------------- weight_norm (new)


@pytest.mark.parametrize(
    ("layer", "args", "dim", "x_shape"),
    [
        ("Linear", (5, 4), 0, (3, 5)),
        ("Linear", (5, 4), 1, (3, 5)),
        ("Linear", (5, 4), None, (3, 5)),
        ("Conv2d", (2, 3, 3), 0, (1, 2, 5, 5)),
        ("Conv2d", (2, 3, 3), 2, (1, 2, 5, 5)),
        ("ConvTranspose1d", (2, 3, 3), 1, (1, 2, 5)),
    ],
)
def test_parametrizations_weight_norm(layer, args, dim, x_shape):
    tm, km = pair(layer, *args, dtype="float64")
    tparams.weight_norm(tm, dim=dim)
    kparams.weight_norm(km, dim=dim)
    assert names(km) == names(tm)
    assert keys(km) == keys(tm)
    g = km.parametrizations.weight.original0
    assert_close(g, tm.parametrizations.weight.original0.detach(), **TOL)
    assert_close(km.weight, tm.weight.detach(), **TOL)
    check_forward_backward(tm, km, *inputs(*x_shape))
    tP.remove_parametrizations(tm, "weight")
    kP.remove_parametrizations(km, "weight")
    assert names(km) == names(tm)
    assert_close(km.weight, tm.weight.detach(), **TOL)


def test_parametrizations_weight_norm_loads_old_checkpoint():
    tm, km = pair("Linear", 4, 3, dtype="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.nn.utils.weight_norm(tm)
    old = tm.state_dict()
    assert {"weight_g", "weight_v"} <= set(old)
    kparams.weight_norm(km)
    km.load_state_dict({k: to_kiln(v) for k, v in old.items()})
    assert_close(km.parametrizations.weight.original0, old["weight_g"], **TOL)
    assert_close(km.weight, tm.weight.detach(), **TOL)


# -------------------------------------------------------------------------- spectral_norm (new)


def sgd_step(module, lr=0.1):
    no_grad = torch.no_grad if isinstance(module, torch.nn.Module) else kiln.no_grad
    with no_grad():
        for p in module.parameters():
            p.sub_(lr * p.grad)
            p.grad = None


@pytest.mark.parametrize(
    ("layer", "args", "kwargs", "x_shape"),
    [
        ("Linear", (6, 4), {}, (3, 6)),
        ("Linear", (6, 4), {"n_power_iterations": 3, "eps": 1e-6}, (3, 6)),
        ("Conv2d", (2, 3, 3), {"dim": 1}, (1, 2, 5, 5)),
        ("ConvTranspose2d", (3, 2, 3), {}, (1, 3, 4, 4)),
    ],
)
def test_parametrizations_spectral_norm_training(layer, args, kwargs, x_shape):
    tm, km = pair(layer, *args, dtype="float64")
    tparams.spectral_norm(tm, **kwargs)
    kparams.spectral_norm(km, **kwargs)
    t_sn, k_sn = tm.parametrizations.weight[0], km.parametrizations.weight[0]
    assert k_sn.dim == t_sn.dim
    assert names(km) == names(tm) and keys(km) == keys(tm)
    # kiln's RNG differs from torch's: start both from torch's singular-vector estimates.
    with kiln.no_grad():
        k_sn._u.copy_(to_kiln(t_sn._u))
        k_sn._v.copy_(to_kiln(t_sn._v))
    for step in range(4):
        check_forward_backward(tm, km, *inputs(*x_shape, seed=step))
        assert_close(k_sn._u, t_sn._u, **TOL)
        assert_close(k_sn._v, t_sn._v, **TOL)
        sgd_step(tm)
        sgd_step(km)
    # In eval mode the estimates stay put.
    tm.eval()
    km.eval()
    u_before = k_sn._u.clone()
    for step in range(2):
        check_forward_backward(tm, km, *inputs(*x_shape, seed=10 + step))
    assert_close(k_sn._u, to_torch_detached(u_before), atol=0, rtol=0)
    assert_close(k_sn._u, t_sn._u, **TOL)
    tP.remove_parametrizations(tm, "weight")
    kP.remove_parametrizations(km, "weight")
    assert names(km) == names(tm)
    assert_close(km.weight, tm.weight.detach(), **TOL)


def test_parametrizations_spectral_norm_vector():
    tm, km = pair("Linear", 4, 3, dtype="float64")
    tparams.spectral_norm(tm, "bias")
    kparams.spectral_norm(km, "bias")
    assert_close(km.bias, tm.bias.detach(), **TOL)
    check_forward_backward(tm, km, *inputs(2, 4))


# ----------------------------------------------------------------------------------- orthogonal


@pytest.mark.parametrize(
    ("shape", "orth_map", "trivialization"),
    [
        ((4, 4), None, True),
        ((4, 4), "cayley", True),
        ((4, 4), "householder", True),
        ((6, 3), None, True),
        ((3, 6), "matrix_exp", True),
        ((6, 3), "cayley", True),
        ((6, 3), "householder", False),
        ((3, 6), "householder", False),
        ((5, 5), "householder", False),
    ],
)
def test_orthogonal(shape, orth_map, trivialization):
    tm, km = pair("Linear", shape[1], shape[0], dtype="float64")
    tparams.orthogonal(tm, orthogonal_map=orth_map, use_trivialization=trivialization)
    kparams.orthogonal(km, orthogonal_map=orth_map, use_trivialization=trivialization)
    t_orth, k_orth = tm.parametrizations.weight[0], km.parametrizations.weight[0]
    assert k_orth.orthogonal_map.name == t_orth.orthogonal_map.name
    assert names(km) == names(tm) and keys(km) == keys(tm)
    if trivialization:
        if shape[0] == shape[1]:
            assert_close(k_orth.base, t_orth.base, atol=1e-12, rtol=1e-12)
        else:
            # The completion of a rectangular matrix is random: take torch's.
            with kiln.no_grad():
                k_orth.base.copy_(to_kiln(t_orth.base))
    assert_close(km.parametrizations.weight.original, tm.parametrizations.weight.original, **TOL)
    assert_close(km.weight, tm.weight.detach(), atol=1e-12, rtol=1e-12)
    # Move away from the initial point so the map itself (not just the base) is exercised;
    # below the diagonal only, as householder reads signs off the diagonal.
    t_new, k_new = inputs(*shape, seed=3)
    with torch.no_grad():
        tm.parametrizations.weight.original.add_(0.3 * t_new.tril(-1))
    with kiln.no_grad():
        km.parametrizations.weight.original.add_(0.3 * k_new.tril(-1))
    w = km.weight.detach()
    tall = w if shape[0] >= shape[1] else w.mT
    assert_close(tall.mT @ tall, torch.eye(min(shape), dtype=torch.float64), atol=1e-10, rtol=0)
    assert_close(km.weight, tm.weight.detach(), atol=1e-9, rtol=1e-9)
    check_forward_backward(tm, km, *inputs(2, shape[1]), tol={"atol": 1e-9, "rtol": 1e-8})


@pytest.mark.parametrize(
    ("kernel", "orth_map"), [((4, 4), None), ((4, 2), None), ((3, 3), "cayley")]
)
def test_orthogonal_batched_conv_weight(kernel, orth_map):
    tm, km = pair("Conv2d", 2, 3, kernel, dtype="float64")
    tparams.orthogonal(tm, orthogonal_map=orth_map)
    kparams.orthogonal(km, orthogonal_map=orth_map)
    t_orth, k_orth = tm.parametrizations.weight[0], km.parametrizations.weight[0]
    if kernel[0] == kernel[1]:
        assert_close(k_orth.base, t_orth.base, atol=1e-12, rtol=1e-12)
    else:
        with kiln.no_grad():
            k_orth.base.copy_(to_kiln(t_orth.base))
    t_new, k_new = inputs(3, 2, *kernel, seed=5)
    with torch.no_grad():
        tm.parametrizations.weight.original.add_(2.0 * t_new.tril(-1))
    with kiln.no_grad():
        km.parametrizations.weight.original.add_(2.0 * k_new.tril(-1))
    assert_close(km.weight, tm.weight.detach(), atol=1e-9, rtol=1e-9)
    check_forward_backward(tm, km, *inputs(1, 2, 6, 6), tol={"atol": 1e-8, "rtol": 1e-8})


def test_orthogonal_keeps_an_orthogonal_weight():
    tm, km = pair("Linear", 5, 5, dtype="float64")
    with torch.no_grad():
        torch.nn.init.orthogonal_(tm.weight)
    copy_state(km, tm)
    tparams.orthogonal(tm)
    kparams.orthogonal(km)
    assert_close(km.parametrizations.weight[0].base, tm.weight.detach(), **TOL)
    assert_close(km.weight, tm.weight.detach(), **TOL)
    # Large entries: the exponential needs several squarings.
    t_new, k_new = inputs(5, 5, seed=8)
    with torch.no_grad():
        tm.parametrizations.weight.original.copy_(4.0 * t_new)
    with kiln.no_grad():
        km.parametrizations.weight.original.copy_(4.0 * k_new)
    assert_close(km.weight, tm.weight.detach(), atol=1e-9, rtol=1e-9)
    check_forward_backward(tm, km, *inputs(3, 5), tol={"atol": 1e-8, "rtol": 1e-8})


def test_orthogonal_float32_and_errors():
    tm, km = pair("Linear", 8, 8)
    tparams.orthogonal(tm)
    kparams.orthogonal(km)
    assert_close(km.weight, tm.weight.detach(), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="matrix or batch of matrices"):
        kparams.orthogonal(knn.Linear(2, 2), "bias")
    with pytest.raises(ValueError, match="orthogonal_map has to be one of"):
        kparams.orthogonal(knn.Linear(2, 2), orthogonal_map="svd")
    m = knn.Linear(3, 3)
    kparams.orthogonal(m, orthogonal_map="cayley", use_trivialization=False)
    with pytest.raises(NotImplementedError):
        m.weight = kiln.eye(3)


# ------------------------------------------------------------------------ hook-based weight_norm


@pytest.mark.parametrize("dim", [0, 1, None])
def test_old_weight_norm(dim):
    tm, km = pair("Conv1d", 2, 3, 3, dtype="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.nn.utils.weight_norm(tm, dim=dim)
    with pytest.warns(FutureWarning, match="deprecated"):
        knn.utils.weight_norm(km, dim=dim)
    assert names(km) == names(tm) == ["bias", "weight_g", "weight_v"]
    assert keys(km) == keys(tm)
    assert_close(km.weight_g, tm.weight_g.detach(), **TOL)
    assert_close(km.weight, tm.weight.detach(), **TOL)
    for step in range(2):
        check_forward_backward(tm, km, *inputs(1, 2, 6, seed=step))
        sgd_step(tm)
        sgd_step(km)
    with (
        pytest.raises(RuntimeError, match="Cannot register two weight_norm"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", FutureWarning)
        knn.utils.weight_norm(km, dim=dim)
    torch.nn.utils.remove_weight_norm(tm)
    knn.utils.remove_weight_norm(km)
    assert names(km) == names(tm) == ["bias", "weight"]
    assert not km._forward_pre_hooks
    check_forward_backward(tm, km, *inputs(1, 2, 6, seed=5))
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found"):
        knn.utils.remove_weight_norm(km)


# ---------------------------------------------------------------------- hook-based spectral_norm


@pytest.mark.parametrize(
    ("layer", "args", "kwargs", "x_shape"),
    [
        ("Linear", (5, 4), {}, (3, 5)),
        ("Conv2d", (2, 3, 3), {"n_power_iterations": 2}, (1, 2, 5, 5)),
        ("ConvTranspose2d", (3, 2, 3), {}, (1, 3, 4, 4)),
    ],
)
def test_old_spectral_norm(layer, args, kwargs, x_shape):
    tm, km = pair(layer, *args, dtype="float64")
    torch.nn.utils.spectral_norm(tm, **kwargs)
    knn.utils.spectral_norm(km, **kwargs)
    assert names(km) == names(tm)
    assert keys(km) == keys(tm)
    with kiln.no_grad():
        km.weight_u.copy_(to_kiln(tm.weight_u))
        km.weight_v.copy_(to_kiln(tm.weight_v))
    for step in range(4):
        check_forward_backward(tm, km, *inputs(*x_shape, seed=step))
        assert_close(km.weight_u, tm.weight_u, **TOL)
        assert_close(km.weight_v, tm.weight_v, **TOL)
        assert_close(km.weight, tm.weight.detach(), **TOL)
        sgd_step(tm)
        sgd_step(km)
    tm.eval()
    km.eval()
    v_before = km.weight_v.clone()
    check_forward_backward(tm, km, *inputs(*x_shape, seed=9))
    assert_close(km.weight_v, to_torch_detached(v_before), atol=0, rtol=0)
    sd = km.state_dict()
    assert sd._metadata[""]["spectral_norm"] == {"weight.version": 1}
    # A round trip through state_dict, then removal.
    fresh = knn.utils.spectral_norm(getattr(knn, layer)(*args), **kwargs).double()
    fresh.load_state_dict(sd)
    assert_close(fresh.weight_v, tm.weight_v, **TOL)
    torch.nn.utils.remove_spectral_norm(tm)
    knn.utils.remove_spectral_norm(km)
    assert names(km) == names(tm) and keys(km) == keys(tm)
    assert not km._state_dict_hooks and not km._load_state_dict_pre_hooks
    assert_close(km.weight, tm.weight.detach(), **TOL)
    check_forward_backward(tm, km, *inputs(*x_shape, seed=11))


def test_old_spectral_norm_errors():
    km = knn.Linear(3, 3)
    knn.utils.spectral_norm(km)
    with pytest.raises(RuntimeError, match="Cannot register two spectral_norm"):
        knn.utils.spectral_norm(km)
    with pytest.raises(ValueError, match="spectral_norm of 'bias' not found"):
        knn.utils.remove_spectral_norm(km, "bias")


# ---------------------------------------------------------------------------------------- fusion


def eval_pair(name, *args, **kwargs):
    tm, km = pair(name, *args, dtype="float64", **kwargs)
    return tm.eval(), km.eval()


@pytest.mark.parametrize(
    ("conv", "args", "bn", "transpose", "x_shape"),
    [
        ("Conv2d", (3, 4, 3), "BatchNorm2d", False, (2, 3, 6, 6)),
        ("Conv1d", (3, 4, 3), "BatchNorm1d", False, (2, 3, 7)),
        ("ConvTranspose2d", (3, 4, 3), "BatchNorm2d", True, (2, 3, 5, 5)),
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_fuse_conv_bn_eval(conv, args, bn, transpose, x_shape, bias):
    t_conv, k_conv = eval_pair(conv, *args, bias=bias)
    t_bn, k_bn = eval_pair(bn, 4)
    t_x, k_x = inputs(*x_shape)
    with torch.no_grad():
        t_ref = t_bn(t_conv(t_x))
    k_ref = k_bn(k_conv(k_x))
    t_fused = torch.nn.utils.fuse_conv_bn_eval(t_conv, t_bn, transpose=transpose)
    k_fused = knn.utils.fuse_conv_bn_eval(k_conv, k_bn, transpose=transpose)
    assert k_fused is not k_conv and isinstance(k_fused, type(k_conv))
    assert isinstance(k_fused.bias, knn.Parameter)
    assert_close(k_fused.weight, t_fused.weight.detach(), **TOL)
    assert_close(k_fused.bias, t_fused.bias.detach(), **TOL)
    k_out = k_fused(k_x)
    assert_close(k_out, t_ref, **TOL)
    assert_close(k_out, to_torch_detached(k_ref), **TOL)
    if not bias:
        assert k_conv.bias is None


def test_fuse_linear_bn_eval():
    t_lin, k_lin = eval_pair("Linear", 5, 4)
    t_bn, k_bn = eval_pair("BatchNorm1d", 4)
    t_x, k_x = inputs(3, 5)
    k_ref = k_bn(k_lin(k_x))
    t_fused = torch.nn.utils.fuse_linear_bn_eval(t_lin, t_bn)
    k_fused = knn.utils.fuse_linear_bn_eval(k_lin, k_bn)
    assert_close(k_fused.weight, t_fused.weight.detach(), **TOL)
    assert_close(k_fused.bias, t_fused.bias.detach(), **TOL)
    assert_close(k_fused(k_x), to_torch_detached(k_ref), **TOL)
    with pytest.raises(AssertionError, match="Fusion only for eval"):
        knn.utils.fuse_linear_bn_eval(k_lin.train(), k_bn)
    with pytest.raises(AssertionError, match="out_features"):
        knn.utils.fuse_linear_bn_eval(k_lin.eval(), knn.BatchNorm1d(3).eval())


def test_fuse_weights_functions():
    t_lin, k_lin = eval_pair("Linear", 5, 4, bias=False)
    t_bn, k_bn = eval_pair("BatchNorm1d", 4)
    t_w, t_b = torch.nn.utils.fuse_linear_bn_weights(
        t_lin.weight, None, t_bn.running_mean, t_bn.running_var, t_bn.eps, t_bn.weight, t_bn.bias
    )
    k_w, k_b = knn.utils.fuse_linear_bn_weights(
        k_lin.weight, None, k_bn.running_mean, k_bn.running_var, k_bn.eps, k_bn.weight, k_bn.bias
    )
    assert_close(k_w, t_w.detach(), **TOL)
    assert_close(k_b, t_b.detach(), **TOL)
    assert k_w.requires_grad and not k_b.requires_grad
    t_conv, k_conv = eval_pair("Conv2d", 2, 3, 1)
    t_w, t_b = torch.nn.utils.fuse_conv_bn_weights(
        t_conv.weight, t_conv.bias, t_bn.running_mean[:3], t_bn.running_var[:3], 1e-3, None, None
    )
    k_w, k_b = knn.utils.fuse_conv_bn_weights(
        k_conv.weight, k_conv.bias, k_bn.running_mean[:3], k_bn.running_var[:3], 1e-3, None, None
    )
    assert_close(k_w, t_w.detach(), **TOL)
    assert_close(k_b, t_b.detach(), **TOL)


# ------------------------------------------------------------------------------------ skip_init


def test_skip_init():
    m = knn.utils.skip_init(knn.Linear, 5, out_features=3, dtype=kiln.float64)
    assert isinstance(m, knn.Linear) and m.weight.shape == (3, 5) and m.bias.shape == (3,)
    assert m.weight.dtype == kiln.float64 and m.weight.requires_grad
    # Initializers work again afterwards.
    w = kiln.zeros(2, 2)
    knn.init.ones_(w)
    assert w.sum().item() == 4.0

    class NoDevice(knn.Module):
        def __init__(self, n):
            super().__init__()

    with pytest.raises(RuntimeError, match="'device' arg"):
        knn.utils.skip_init(NoDevice, 3)
    with pytest.raises(RuntimeError, match="Expected a Module"):
        knn.utils.skip_init(int, 3)


# ------------------------------------------------------------------------------- functional_call


def test_stateless_functional_call():
    tm, km = pair("Linear", 4, 3, dtype="float64")
    t_w, k_w = inputs(3, 4, seed=4)
    t_x, k_x = inputs(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        t_out = torch.nn.utils.stateless.functional_call(tm, {"weight": t_w}, t_x)
    k_w.requires_grad_(True)
    with pytest.warns(FutureWarning, match="deprecated"):
        k_out = knn.utils.stateless.functional_call(km, {"weight": k_w}, k_x)
    assert_close(k_out, t_out.detach(), **TOL)
    k_out.sum().backward()
    assert k_w.grad is not None and km.weight.grad is None
    assert isinstance(km.weight, knn.Parameter)
    assert_close(km.weight, tm.weight.detach(), **TOL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(RuntimeError, match="Missing key"):
            knn.utils.stateless.functional_call(km, {"weight": k_w}, k_x, strict=True)
        with pytest.raises(RuntimeError, match="Unexpected key"):
            knn.utils.stateless.functional_call(
                km, {"weight": k_w, "bias": km.bias, "nope": k_w}, k_x, strict=True
            )


class KTied(knn.Module):
    def __init__(self):
        super().__init__()
        self.a = knn.Linear(3, 3)
        self.b = knn.Linear(3, 3)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


def test_stateless_functional_call_tied_weights():
    m = KTied()
    w = kiln.eye(3)
    x = kiln.ones(1, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        tied = knn.utils.stateless.functional_call(m, {"a.weight": w}, (x,))
        untied = knn.utils.stateless.functional_call(m, {"a.weight": w}, (x,), tie_weights=False)
        with pytest.raises(ValueError, match="which are tied"):
            knn.utils.stateless.functional_call(m, {"a.weight": w, "b.weight": w * 2}, (x,))
    bias_a, bias_b = m.a.bias.detach(), m.b.bias.detach()
    assert_close(tied, to_torch_detached(x + bias_a + bias_b))
    expected_untied = (x + bias_a) @ m.b.weight.detach().mT + bias_b
    assert_close(untied, to_torch_detached(expected_untied))
    assert m.b.weight is m.a.weight


def test_stateless_functional_call_on_parametrized_module():
    tm, km = pair("Linear", 3, 3, dtype="float64")
    tP.register_parametrization(tm, "weight", TScale())
    kP.register_parametrization(km, "weight", KScale())
    t_w, k_w = inputs(3, 3, seed=7)
    t_x, k_x = inputs(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        t_out = torch.nn.utils.stateless.functional_call(tm, {"weight": t_w}, t_x)
        k_out = knn.utils.stateless.functional_call(km, {"weight": k_w}, k_x)
        orig = "parametrizations.weight.original"
        t_out2 = torch.nn.utils.stateless.functional_call(tm, {orig: t_w}, t_x)
        k_out2 = knn.utils.stateless.functional_call(km, {orig: k_w}, k_x)
    assert_close(k_out, t_out.detach(), **TOL)
    assert_close(k_out2, t_out2.detach(), **TOL)
    assert_close(km.parametrizations.weight.original, tm.parametrizations.weight.original, **TOL)


def test_copy_state_roundtrip_with_parametrization():
    tm, km = pair("Conv2d", 2, 2, 3, dtype="float64")
    tparams.weight_norm(tm)
    kparams.weight_norm(km)
    with torch.no_grad():
        tm.parametrizations.weight.original0.mul_(2.0)
    copy_state(km, tm)
    check_forward_backward(tm, km, *inputs(1, 2, 5, 5))
