"""The thin layers of kiln/nn/modules/composite.py against torch.nn's: outputs, gradients and
running statistics."""

import numpy as np
import pytest
import torch

import kiln

G = np.random.default_rng(0)


def arr(*shape):
    return G.standard_normal(shape).astype(np.float32)


def signs(*shape):
    return np.where(G.standard_normal(shape) > 0, 1.0, -1.0).astype(np.float32)


CASES = [
    ("InstanceNorm1d", (4,), {}, [arr(2, 4, 7)]),
    ("InstanceNorm2d", (3,), {"affine": True}, [arr(2, 3, 4, 5)]),
    ("InstanceNorm2d", (3,), {"affine": True, "track_running_stats": True}, [arr(2, 3, 4, 5)]),
    ("InstanceNorm3d", (2,), {}, [arr(1, 2, 3, 4, 5)]),
    ("PixelShuffle", (2,), {}, [arr(1, 8, 3, 3)]),
    ("PixelUnshuffle", (2,), {}, [arr(1, 2, 4, 6)]),
    ("ChannelShuffle", (2,), {}, [arr(1, 4, 3, 3)]),
    ("CosineSimilarity", (), {"dim": 1}, [arr(3, 5), arr(3, 5)]),
    ("PairwiseDistance", (), {}, [arr(3, 5), arr(3, 5)]),
    ("MarginRankingLoss", (), {"margin": 0.1}, [arr(6), arr(6), signs(6)]),
    ("HingeEmbeddingLoss", (), {}, [arr(6), signs(6)]),
    ("SoftMarginLoss", (), {}, [arr(6), signs(6)]),
    ("CosineEmbeddingLoss", (), {}, [arr(4, 5), arr(4, 5), signs(4)]),
    ("TripletMarginLoss", (), {"margin": 0.5}, [arr(4, 5), arr(4, 5), arr(4, 5)]),
    ("GaussianNLLLoss", (), {}, [arr(4, 3), arr(4, 3), np.abs(arr(4, 3)) + 0.5]),
    ("PoissonNLLLoss", (), {}, [arr(5), np.abs(arr(5)) * 2]),
    ("ZeroPad2d", (1,), {}, [arr(1, 2, 3, 3)]),
    ("ConstantPad1d", ((1, 2), 3.5), {}, [arr(1, 2, 4)]),
    ("ReflectionPad2d", ((1, 1, 2, 0),), {}, [arr(1, 2, 4, 4)]),
    ("ReplicationPad1d", (2,), {}, [arr(1, 2, 4)]),
    ("CircularPad2d", (1,), {}, [arr(1, 2, 3, 3)]),
    ("UpsamplingNearest2d", (), {"scale_factor": 2}, [arr(1, 2, 3, 3)]),
    ("UpsamplingBilinear2d", (), {"size": (5, 7)}, [arr(1, 2, 3, 3)]),
]


@pytest.mark.parametrize("name,args,kw,arrays", CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_matches_torch(name, args, kw, arrays):
    ours, theirs = getattr(kiln.nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    if getattr(theirs, "weight", None) is not None:
        w, b = arr(*theirs.weight.shape), arr(*theirs.bias.shape)
        with torch.no_grad():
            theirs.weight.copy_(torch.from_numpy(w))
            theirs.bias.copy_(torch.from_numpy(b))
        with kiln.no_grad():
            ours.weight.copy_(kiln.from_numpy(w))
            ours.bias.copy_(kiln.from_numpy(b))
    ki = [kiln.from_numpy(a.copy()).requires_grad_() for a in arrays[:1]] + [
        kiln.from_numpy(a.copy()) for a in arrays[1:]]
    ti = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays[:1]] + [
        torch.from_numpy(a.copy()) for a in arrays[1:]]
    ko, to = ours(*ki), theirs(*ti)
    np.testing.assert_allclose(ko.detach().numpy(), to.detach().numpy(), rtol=1e-5, atol=1e-5)
    w = arr(*to.shape)
    (ko * kiln.from_numpy(w)).sum().backward()
    (to * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(ki[0].grad.numpy(), ti[0].grad.numpy(), rtol=1e-4, atol=1e-5)
    for n in ("weight", "bias"):
        if getattr(theirs, n, None) is not None:
            np.testing.assert_allclose(getattr(ours, n).grad.numpy(),
                                       getattr(theirs, n).grad.numpy(), rtol=1e-4, atol=1e-5)
    for n in ("running_mean", "running_var"):
        if getattr(theirs, n, None) is not None:
            np.testing.assert_allclose(getattr(ours, n).numpy(), getattr(theirs, n).numpy(),
                                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pads", [(1, 2), (2, 0, 1, 1), (-1, 2, 1, -1), (1, 1, 1, 1, 1, 1)])
def test_pad_gradients_match_torch(mode, pads):
    rank = 2 + max(len(pads) // 2, 1)
    shape = (2, 3, 4, 5, 4)[:rank]
    a = arr(*shape)
    x, t = kiln.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a.copy()).requires_grad_()
    try:
        want = torch.nn.functional.pad(t, pads, mode)
    except (RuntimeError, NotImplementedError) as e:
        with pytest.raises(type(e)):
            kiln.nn.functional.pad(x, pads, mode)
        return
    got = kiln.nn.functional.pad(x, pads, mode)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy())
    w = arr(*want.shape)
    (got * kiln.from_numpy(w)).sum().backward()
    (want * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
