"""kiln.nn.init: formulas compared with torch.nn.init, distributions checked statistically
(kiln's RNG stream differs from torch's, so random values themselves are not compared)."""

import math

import numpy as np
import pytest
import torch
from conftest import assert_close

import kiln
from kiln.nn import init


def values(t):
    return t.detach().float().numpy().ravel()


@pytest.mark.parametrize(
    "name,param",
    [
        ("linear", None),
        ("conv2d", None),
        ("sigmoid", None),
        ("tanh", None),
        ("relu", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.2),
        ("leaky_relu", 1),
        ("selu", None),
    ],
)
def test_calculate_gain_matches_torch(name, param):
    assert init.calculate_gain(name, param) == torch.nn.init.calculate_gain(name, param)


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")
    with pytest.raises(ValueError, match="negative_slope True not a valid number"):
        init.calculate_gain("leaky_relu", True)


@pytest.mark.parametrize("shape", [(3, 4), (6, 3, 5), (8, 4, 3, 3), (2, 0)])
def test_fan_in_and_fan_out_match_torch(shape):
    got = init._calculate_fan_in_and_fan_out(kiln.empty(shape))
    assert got == torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))


def test_fan_errors():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(kiln.empty(4))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(kiln.empty((3, 3)), mode="fan_avg")


def test_constant_ones_zeros_return_the_tensor():
    t = kiln.empty((2, 3))
    assert init.constant_(t, 2.5) is t
    assert_close(t, torch.full((2, 3), 2.5))
    assert_close(init.ones_(t), torch.ones(2, 3))
    assert_close(init.zeros_(t), torch.zeros(2, 3))
    d = kiln.empty((2, 2), dtype=kiln.float64)
    assert_close(init.ones_(d), torch.ones(2, 2, dtype=torch.float64))


def test_uniform_and_normal_statistics_and_seeding():
    kiln.manual_seed(0)
    t = init.uniform_(kiln.empty((200, 100)), -2.0, 3.0)
    v = values(t)
    assert v.min() >= -2.0 and v.max() <= 3.0 and abs(v.mean() - 0.5) < 0.1
    n = values(init.normal_(kiln.empty((200, 100)), 1.0, 2.0))
    assert abs(n.mean() - 1.0) < 0.1 and abs(n.std() - 2.0) < 0.1
    kiln.manual_seed(7)
    a = values(init.normal_(kiln.empty(50)))
    kiln.manual_seed(7)
    b = values(init.normal_(kiln.empty(50)))
    np.testing.assert_array_equal(a, b)


def test_xavier():
    t = kiln.empty((128, 64))
    bound = math.sqrt(6.0 / (128 + 64)) * 2.0
    v = values(init.xavier_uniform_(t, gain=2.0))
    assert v.max() <= bound and v.min() >= -bound and v.max() > 0.9 * bound
    v = values(init.xavier_normal_(kiln.empty((256, 128))))
    assert abs(v.std() - math.sqrt(2.0 / (256 + 128))) < 0.05 * math.sqrt(2.0 / 384)


@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
@pytest.mark.parametrize("nonlinearity,a", [("relu", 0), ("leaky_relu", math.sqrt(5))])
def test_kaiming(mode, nonlinearity, a):
    shape = (64, 32, 3, 3)
    fan = 32 * 9 if mode == "fan_in" else 64 * 9
    std = torch.nn.init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    v = values(init.kaiming_uniform_(kiln.empty(shape), a=a, mode=mode, nonlinearity=nonlinearity))
    assert v.max() <= math.sqrt(3) * std and v.max() > 0.9 * math.sqrt(3) * std
    v = values(init.kaiming_normal_(kiln.empty(shape), a=a, mode=mode, nonlinearity=nonlinearity))
    assert abs(v.std() - std) < 0.05 * std


def test_kaiming_zero_element_warns():
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        init.kaiming_uniform_(kiln.empty((0, 3)))


@pytest.mark.parametrize(
    "mean,std,a,b",
    [(0.0, 1.0, -2.0, 2.0), (0.0, 0.02, -0.04, 0.04), (0.0, 1.0, 2.0, 3.0), (1.0, 0.5, 0.0, 1.2)],
)
def test_trunc_normal_stays_in_bounds_with_torch_moments(mean, std, a, b):
    kiln.manual_seed(0)
    v = values(init.trunc_normal_(kiln.empty((100, 100)), mean, std, a, b))
    assert v.min() >= a and v.max() <= b
    ref = torch.nn.init.trunc_normal_(torch.empty(200, 200), mean, std, a, b)
    assert abs(v.mean() - ref.mean().item()) < 0.05 * (b - a)
    assert abs(v.std() - ref.std().item()) < 0.05 * (b - a)


def test_eye_and_dirac_match_torch():
    for shape in [(3, 5), (4, 2), (3, 3)]:
        assert_close(init.eye_(kiln.empty(shape)), torch.nn.init.eye_(torch.empty(shape)))
    for shape, groups in [((4, 2, 3, 3), 2), ((3, 3, 5), 1), ((2, 4, 3, 3, 3), 1)]:
        assert_close(
            init.dirac_(kiln.empty(shape), groups), torch.nn.init.dirac_(torch.empty(shape), groups)
        )
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        init.eye_(kiln.empty((2, 2, 2)))
    with pytest.raises(ValueError, match="Only tensors with 3, 4, or 5 dimensions"):
        init.dirac_(kiln.empty((2, 2)))
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        init.dirac_(kiln.empty((3, 2, 3)), groups=2)


@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (5, 2, 3)])
def test_orthogonal(shape):
    t = init.orthogonal_(kiln.empty(shape), gain=2.0)
    m = t.detach().numpy().reshape(shape[0], -1).astype(np.float64)
    gram = m @ m.T if shape[0] <= m.shape[1] else m.T @ m
    np.testing.assert_allclose(gram, 4.0 * np.eye(gram.shape[0]), atol=1e-4)
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
        init.orthogonal_(kiln.empty(3))
