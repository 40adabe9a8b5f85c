"""ConvTranspose1d/2d against torch.nn's: outputs, gradients of input, weight and bias (the
derivative of conv_transpose), output_size, and a training step of a tiny decoder."""

import numpy as np
import pytest
import torch

import kiln

G = np.random.default_rng(0)

CASES = [
    ("ConvTranspose2d", (4, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}, (2, 4, 5, 5)),
    ("ConvTranspose2d", (4, 6, (2, 3)), {"stride": (1, 2), "groups": 2, "dilation": (2, 1)},
     (1, 4, 4, 6)),
    ("ConvTranspose2d", (4, 3, 3), {"bias": False}, (4, 5, 5)),  # unbatched
    ("ConvTranspose1d", (3, 5, 3), {"stride": 2, "padding": 1}, (2, 3, 7)),
]


@pytest.mark.parametrize("name,args,kw,shape", CASES, ids=[f"{c[0]}-{k}" for k, c in
                                                            enumerate(CASES)])
def test_matches_torch(name, args, kw, shape):
    ours, theirs = getattr(kiln.nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    ours.load_state_dict({k: kiln.from_numpy(v.detach().numpy().copy())
                          for k, v in theirs.state_dict().items()})  # fmt: skip
    a = G.standard_normal(shape).astype(np.float32)
    x, t = kiln.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a.copy()).requires_grad_()
    ko, to = ours(x), theirs(t)
    np.testing.assert_allclose(ko.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)
    w = G.standard_normal(tuple(to.shape)).astype(np.float32)
    (ko * kiln.from_numpy(w)).sum().backward()
    (to * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)
    for (_, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_output_size_picks_the_output_padding():
    m = kiln.nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1)
    x = kiln.randn(1, 2, 4, 4)
    assert tuple(m(x).shape) == (1, 2, 7, 7)
    assert tuple(m(x, output_size=(8, 8)).shape) == (1, 2, 8, 8)
    with pytest.raises(ValueError, match="valid sizes range from 7 to 8"):
        m(x, output_size=(9, 9))


def test_3d_module_trains_like_torch():
    t = torch.nn.ConvTranspose3d(2, 3, 2, stride=2).double()
    m = kiln.nn.ConvTranspose3d(2, 3, 2, stride=2, dtype=kiln.float64)
    m.load_state_dict({n: kiln.tensor(v.detach().numpy()) for n, v in t.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 3, 3))
    (m(kiln.tensor(x)) ** 2).sum().backward()
    (t(torch.tensor(x)) ** 2).sum().backward()
    for (name, a), (_, b) in zip(m.named_parameters(), t.named_parameters(), strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, err_msg=name)


def test_a_decoder_compiles_into_one_part():
    from kiln._capture.backend_compiled import CpuBackend

    m = kiln.nn.Sequential(kiln.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
                           kiln.nn.ReLU(), kiln.nn.Conv2d(3, 2, 3, padding=1)).eval()
    for dynamic, shapes in ((None, [(2, 4, 5, 5)]), (True, [(2, 4, 5, 5), (3, 4, 6, 7)])):
        kiln.compiler.reset()
        backend = CpuBackend(fallback=False)
        compiled = kiln.compile(m, backend=backend, dynamic=dynamic)
        with kiln.no_grad():
            for s in shapes:
                x = kiln.randn(*s)
                np.testing.assert_allclose(compiled(x).numpy(), m(x).numpy(), rtol=1e-4,
                                           atol=1e-5)
        assert all(r.eager_nodes == 0 and r.eager_calls == 0 and len(r.parts) == 1
                   for r in backend.reports)


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_every_conv_transpose_compiles_into_one_part(spatial, batched):
    """conv_transpose1d / 2d / 3d as extern nodes inside the compiled program (groups, stride,
    dilation, output padding, bias; an unbatched input too), fused with the code around them."""
    from kiln._capture.backend_compiled import CpuBackend

    conv = getattr(kiln.nn, f"ConvTranspose{spatial}d")
    m = kiln.nn.Sequential(conv(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2,
                                dilation=1 + (spatial == 1)), kiln.nn.GELU()).eval()
    shape = (4,) + (5, 4, 3)[:spatial]
    if batched:
        shape = (2, *shape)
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(m, backend=backend)
    with kiln.no_grad():
        x = kiln.randn(*shape)
        np.testing.assert_allclose(compiled(x * 1).numpy(), m(x).numpy(), rtol=1e-4, atol=1e-5)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    assert report.infos[0]["extern_kernels"] == 1


@pytest.mark.parametrize("kw", [dict(stride=1, dilation=2, output_padding=1),
                                dict(stride=2, dilation=3, output_padding=2, padding=1)],
                         ids=["stride1", "stride2_padded"])
def test_gradients_with_output_padding_past_the_stride(kw):
    """torch allows output_padding >= stride below the dilation: trailing output positions no
    input element reaches, which the backward must not hand back to the input."""
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((1, 2, 4, 5)), rng.standard_normal((2, 3, 2, 3))
    t, tw = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
    k, kw_ = kiln.tensor(a, requires_grad=True), kiln.tensor(w, requires_grad=True)
    yt = torch.nn.functional.conv_transpose2d(t, tw, **kw)
    yk = kiln.nn.functional.conv_transpose2d(k, kw_, **kw)
    g = rng.standard_normal(tuple(yt.shape))
    (yt * torch.tensor(g)).sum().backward()
    (yk * kiln.tensor(g)).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kw_.grad.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-12)
