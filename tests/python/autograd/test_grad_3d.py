"""Gradients of the 3-D convolution and pooling ops against torch, and gradcheck in float64:
conv3d (stride, padding, dilation, groups, 'same'), conv_transpose3d, avg_pool3d (both
count_include_pad settings and divisor_override), adaptive_avg_pool3d and max_pool3d."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
import kiln.nn.functional as KF  # noqa: E402

TF = torch.nn.functional
G = np.random.default_rng(3)


def _arr(*shape):
    return G.standard_normal(shape)


def _check(name, arrays, **kw):
    """op(*arrays, **kw) in kiln and torch: values and every input's gradient (float64)."""
    ks = [kiln.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    ours, theirs = getattr(KF, name)(*ks, **kw), getattr(TF, name)(*ts, **kw)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10)
    w = G.standard_normal(tuple(theirs.shape))
    (ours * kiln.tensor(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    for k, t in zip(ks, ts, strict=True):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-10)


CONVS = [
    ((2, 3, 5, 6, 4), (4, 3, 2, 3, 2), {}),
    ((1, 4, 7, 6, 6), (6, 2, 3, 3, 3), dict(stride=2, padding=1, dilation=(1, 2, 1), groups=2)),
    ((2, 2, 5, 5, 5), (3, 2, 2, 2, 3), dict(padding="same")),
    ((3, 4, 5, 4), (2, 3, 2, 2, 2), dict(stride=(1, 2, 1))),  # unbatched
]


@pytest.mark.parametrize("x,w,kw", CONVS, ids=[str(c[2]) for c in CONVS])
def test_conv3d(x, w, kw):
    _check("conv3d", [_arr(*x), _arr(*w), _arr(w[0])], **kw)


TRANSPOSED = [
    ((2, 3, 3, 4, 3), (3, 2, 2, 3, 2), {}),
    ((1, 4, 3, 3, 4), (4, 3, 3, 2, 3), dict(stride=2, padding=1, output_padding=1, groups=2)),
    ((2, 2, 3, 3, 3), (2, 3, 2, 2, 2), dict(dilation=2)),
]


@pytest.mark.parametrize("x,w,kw", TRANSPOSED, ids=[str(c[2]) for c in TRANSPOSED])
def test_conv_transpose3d(x, w, kw):
    out = w[1] * kw.get("groups", 1)
    _check("conv_transpose3d", [_arr(*x), _arr(*w), _arr(out)], **kw)


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(2, 3, 2), stride=1, padding=(1, 1, 0), count_include_pad=False),
        dict(kernel_size=2, stride=(1, 2, 2), divisor_override=3),
    ],
)
def test_avg_pool3d(kw):
    _check("avg_pool3d", [_arr(2, 3, 5, 6, 7)], **kw)
    _check("avg_pool3d", [_arr(3, 5, 4, 6)], **kw)  # unbatched


def test_adaptive_avg_and_max_pool3d():
    _check("adaptive_avg_pool3d", [_arr(2, 3, 7, 5, 6)], output_size=(3, 2, 4))
    _check("adaptive_avg_pool3d", [_arr(2, 6, 5, 4)], output_size=2)
    _check("max_pool3d", [_arr(2, 3, 6, 5, 7)], kernel_size=2, stride=(2, 1, 2), padding=1)


def test_gradcheck_3d_ops():
    x = kiln.tensor(_arr(1, 2, 4, 4, 3), requires_grad=True)
    w = kiln.tensor(_arr(2, 1, 2, 2, 2), requires_grad=True)
    assert kiln.autograd.gradcheck(lambda a, b: KF.conv3d(a, b, padding=1, groups=2), (x, w))
    assert kiln.autograd.gradcheck(lambda a, b: KF.conv_transpose3d(a, b, stride=2), (x, w))
    assert kiln.autograd.gradcheck(
        lambda a: KF.avg_pool3d(a, 2, stride=1, padding=1, count_include_pad=False), (x,)
    )
    assert kiln.autograd.gradcheck(lambda a: KF.adaptive_avg_pool3d(a, (3, 2, 2)), (x,))


def test_ceil_mode_avg_pool_gradcheck():
    x = kiln.tensor(_arr(1, 1, 5, 5, 5), requires_grad=True)
    assert kiln.autograd.gradcheck(lambda a: KF.avg_pool3d(a, 2, ceil_mode=True), (x,))
