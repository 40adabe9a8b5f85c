"""conv3d compiles (it was an eager node): eager's convolution as an extern node with the bias
as a fused epilogue, its compiled derivative conv_transpose3d plus the weight-gradient extern;
conv1d/2d/3d with padding='same'/'valid' compile too (they were eager nodes). Values and
gradients equal torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

CONV3D = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(1, 2, 1), padding=(0, 1, 2), dilation=(2, 1, 1)),
    dict(groups=2, padding=1),
]


def run(fn, tfn, arrays, grad_of):
    backend = CpuBackend(fallback=False)
    ks = [kiln.tensor(a, requires_grad=i in grad_of) for i, a in enumerate(arrays)]
    ts = [torch.tensor(a, requires_grad=i in grad_of) for i, a in enumerate(arrays)]
    got = kiln.compile(fn, backend=backend)(*ks)
    want = tfn(*ts)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.fallbacks == [] and len(report.parts) == 1
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-10)
    if grad_of:
        assert report.backward_parts == 1
        weight = np.random.default_rng(5).normal(size=tuple(want.shape))
        (got * kiln.tensor(weight)).sum().backward()
        (want * torch.tensor(weight)).sum().backward()
        for i in grad_of:
            np.testing.assert_allclose(ks[i].grad.numpy(), ts[i].grad.numpy(), rtol=1e-9,
                                       atol=1e-10)


@pytest.mark.parametrize("case", CONV3D, ids=str)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("train", [False, True])
def test_conv3d(case, bias, train):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 5, 6, 7))
    w = rng.normal(size=(6, 4 // case.get("groups", 1), 3, 2, 3))
    b = rng.normal(size=(6,))
    arrays = [x, w, b] if bias else [x, w]

    def make(f):
        return lambda *t: f(*t, **case).relu()

    run(make(F.conv3d), make(TF.conv3d), arrays, {0, 1, 2} if train and bias else
        ({0, 1} if train else set()))


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("kernel", [3, 4])
@pytest.mark.parametrize("dilation", [1, 2])
def test_padding_by_name(spatial, padding, kernel, dilation):
    rng = np.random.default_rng(spatial)
    x = rng.normal(size=(2, 3) + (9,) * spatial)
    w = rng.normal(size=(5, 3) + (kernel,) * spatial)
    name = f"conv{spatial}d"

    def make(mod):
        return lambda x, w: getattr(mod, name)(x, w, padding=padding, dilation=dilation) * 2

    run(make(F), make(TF), [x, w], {0, 1})


def test_conv3d_module_in_a_net():
    net = nn.Sequential(nn.Conv3d(2, 4, 3, padding="same"), nn.ReLU(), nn.MaxPool3d(2),
                        nn.Conv3d(4, 4, 1))
    x = kiln.randn(2, 2, 6, 6, 6)
    backend = CpuBackend(fallback=False)
    with kiln.no_grad():
        got = kiln.compile(net, backend=backend)(x)
        np.testing.assert_allclose(got.numpy(), net(x).numpy(), rtol=1e-5, atol=1e-5)
    assert backend.reports[0].eager_nodes == 0
