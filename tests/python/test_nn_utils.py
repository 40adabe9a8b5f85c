"""kiln.nn.utils compared with torch.nn.utils: clip_grad_norm_ (total norm and clipped grads for
several norm types and dtypes, non-finite norms), clip_grad_value_, get_total_norm /
clip_grads_with_norm_, and parameters_to_vector / vector_to_parameters."""

import math
import warnings

import numpy as np
import pytest
import torch

import kiln
import kiln.nn as knn
from kiln.nn import utils as kutils

SHAPES = [(4,), (3, 5), (2, 3, 6), ()]


class _GradParameter(knn.Parameter):
    """A Parameter with a plain ``.grad`` attribute, used only while kiln.Tensor.grad is a
    read-only property (before the autograd engine lands); clipping only reads ``p.grad``."""

    grad = None


def _param_cls():
    p = knn.Parameter(kiln.zeros(1))
    try:
        p.grad = kiln.ones(1)
    except AttributeError:
        return _GradParameter
    return knn.Parameter


PARAM_CLS = _param_cls()


def to_numpy(t):
    return np.array(t.detach().numpy(), copy=True)


def make(dtype="float32", seed=0, scale=1.0, no_grad=(), shapes=SHAPES):
    """torch and kiln parameters with equal values and equal random grads (None at the
    indices in ``no_grad``)."""
    rng = np.random.default_rng(seed)
    tps, kps = [], []
    for i, shape in enumerate(shapes):
        value = rng.standard_normal(shape).astype(dtype)
        tp = torch.nn.Parameter(torch.from_numpy(np.array(value, copy=True)))
        kp = PARAM_CLS(kiln.from_numpy(np.array(value, copy=True)))
        if i not in no_grad:
            g = (rng.standard_normal(shape) * scale).astype(dtype)
            tp.grad = torch.from_numpy(np.array(g, copy=True))
            kp.grad = kiln.from_numpy(np.array(g, copy=True))
        tps.append(tp)
        kps.append(kp)
    return tps, kps


def assert_close(k, t, rtol, atol=0.0):
    assert k.dtype.name == str(t.dtype).replace("torch.", "")
    assert tuple(k.shape) == tuple(t.shape)
    np.testing.assert_allclose(to_numpy(k), to_numpy(t), rtol=rtol, atol=atol, equal_nan=True)


def assert_grads_close(kps, tps, rtol):
    for kp, tp in zip(kps, tps, strict=True):
        assert (kp.grad is None) == (tp.grad is None)
        if tp.grad is not None:
            assert_close(kp.grad, tp.grad, rtol)


# Norms of float32 sums may be accumulated in a different order than torch's; float64 is tight.
RTOL = {"float32": 1e-6, "float64": 1e-13}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf, 3.5, 0.5, "inf"])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(dtype, norm_type, max_norm):
    tps, kps = make(dtype, no_grad={1})
    t_total = torch.nn.utils.clip_grad_norm_(tps, max_norm, norm_type=norm_type)
    k_total = kutils.clip_grad_norm_(kps, max_norm, norm_type=norm_type)
    assert k_total.dim() == 0
    assert_close(k_total, t_total, RTOL[dtype])
    assert_grads_close(kps, tps, RTOL[dtype])
    clipped = float(t_total) > max_norm
    unchanged = [to_numpy(k.grad) for k in make(dtype, no_grad={1})[1] if k.grad is not None]
    now = [to_numpy(k.grad) for k in kps if k.grad is not None]
    assert clipped != all(np.array_equal(a, b) for a, b in zip(unchanged, now, strict=True))


def test_clip_grad_norm_single_tensor_and_generator():
    tps, kps = make(scale=5.0)
    t_total = torch.nn.utils.clip_grad_norm_(tps[2], 1.0)
    k_total = kutils.clip_grad_norm_(kps[2], 1.0)
    assert_close(k_total, t_total, 1e-6)
    assert_close(kps[2].grad, tps[2].grad, 1e-6)
    t_total = torch.nn.utils.clip_grad_norm_((p for p in tps), 0.1, norm_type=1)
    k_total = kutils.clip_grad_norm_((p for p in kps), 0.1, norm_type=1)
    assert_close(k_total, t_total, 1e-6)
    assert_grads_close(kps, tps, 1e-6)


def test_clip_grad_norm_no_grads():
    tps, kps = make(no_grad={0, 1, 2, 3})
    t_total = torch.nn.utils.clip_grad_norm_(tps, 1.0)
    k_total = kutils.clip_grad_norm_(kps, 1.0)
    assert_close(k_total, t_total, 0)
    with pytest.warns(UserWarning, match="empty generator"):
        kutils.clip_grad_norm_((p for p in []), 1.0)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_non_finite_norm(bad, norm_type):
    tps, kps = make()
    for p in (tps[1], kps[1]):
        p.grad[0, 0] = bad
    with pytest.raises(RuntimeError) as t_err:
        torch.nn.utils.clip_grad_norm_(tps, 1.0, norm_type, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as k_err:
        kutils.clip_grad_norm_(kps, 1.0, norm_type, error_if_nonfinite=True)
    assert str(k_err.value) == str(t_err.value)
    # Without the check the non-finite norm scales the grads, as torch's does.
    t_total = torch.nn.utils.clip_grad_norm_(tps, 1.0, norm_type)
    k_total = kutils.clip_grad_norm_(kps, 1.0, norm_type)
    assert_close(k_total, t_total, 1e-6)
    assert_grads_close(kps, tps, 1e-6)


@pytest.mark.parametrize("foreach", [True, False])
def test_foreach_flag_accepted(foreach):
    tps, kps = make(scale=3.0)
    t_total = torch.nn.utils.clip_grad_norm_(tps, 1.0, foreach=foreach)
    k_total = kutils.clip_grad_norm_(kps, 1.0, foreach=foreach)
    assert_close(k_total, t_total, 1e-6)
    assert_grads_close(kps, tps, 1e-6)
    torch.nn.utils.clip_grad_value_(tps, 0.1, foreach=foreach)
    kutils.clip_grad_value_(kps, 0.1, foreach=foreach)
    assert_grads_close(kps, tps, 1e-6)


def test_mixed_dtypes():
    tps, kps = make("float32", shapes=[(3,), (4,)])
    t64, k64 = make("float64", seed=1, shapes=[(5,)])
    t_total = torch.nn.utils.clip_grad_norm_(tps + t64, 0.3)
    k_total = kutils.clip_grad_norm_(kps + k64, 0.3)
    assert_close(k_total, t_total, 1e-6)
    assert_grads_close(kps + k64, tps + t64, 1e-6)


def test_get_total_norm_and_clip_grads_with_norm():
    tps, kps = make("float64", scale=3.0)
    tg = [p.grad for p in tps if p.grad is not None]
    kg = [p.grad for p in kps if p.grad is not None]
    t_total = torch.nn.utils.get_total_norm(tg, 3.0)
    k_total = kutils.get_total_norm(kg, 3.0)
    assert_close(k_total, t_total, 1e-13)
    torch.nn.utils.clip_grads_with_norm_(tps, 2.0, t_total)
    kutils.clip_grads_with_norm_(kps, 2.0, k_total)
    assert_grads_close(kps, tps, 1e-13)


def test_deprecated_clip_grad_norm_warns():
    tps, kps = make()
    with pytest.warns(FutureWarning):
        k_total = kutils.clip_grad_norm(kps, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_total = torch.nn.utils.clip_grad_norm(tps, 1.0)
    assert_close(k_total, t_total, 1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clip_value", [0.3, 1, 10.0])
def test_clip_grad_value_matches_torch(dtype, clip_value):
    tps, kps = make(dtype, scale=2.0, no_grad={0})
    assert torch.nn.utils.clip_grad_value_(tps, clip_value) is None
    assert kutils.clip_grad_value_(kps, clip_value) is None
    assert_grads_close(kps, tps, 0)
    tps, kps = make(dtype, scale=2.0)
    torch.nn.utils.clip_grad_value_(tps[1], clip_value)
    kutils.clip_grad_value_(kps[1], clip_value)
    assert_grads_close(kps, tps, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_parameters_to_vector_and_back(dtype):
    tps, kps = make(dtype)
    tvec = torch.nn.utils.parameters_to_vector(tps)
    kvec = kutils.parameters_to_vector(kps)
    assert_close(kvec, tvec.detach(), 0)
    new = np.arange(kvec.numel(), dtype=dtype)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(new.copy()), tps)
    kutils.vector_to_parameters(kiln.from_numpy(new.copy()), kps)
    for kp, tp in zip(kps, tps, strict=True):
        assert_close(kp, tp.detach(), 0)
        assert isinstance(kp, PARAM_CLS)
    with pytest.raises(TypeError, match="expected kiln.Tensor, but got: list"):
        kutils.vector_to_parameters([1.0], kps)


def test_importable_as_torch_spelling():
    import kiln.nn.utils as mod

    assert kiln.nn.utils is mod
    assert mod.clip_grad_norm_ is kutils.clip_grad_norm_
