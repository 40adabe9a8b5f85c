"""kiln.distributions against torch.distributions: values, gradients, shapes, sampling
statistics and argument validation."""

import math

import numpy as np
import pytest
import torch
import torch.distributions as TD
from conftest import to_kiln, to_torch

import kiln
import kiln.distributions as D
from kiln.distributions import _sampling


@pytest.fixture(autouse=True)
def _validation_on_in_both():
    """Argument validation on in torch and kiln for every test: torch.compile, which other test
    modules of the same run call, switches torch's default off."""
    theirs, ours = TD.Distribution._validate_args, D.Distribution._validate_args
    TD.Distribution.set_default_validate_args(True)
    D.Distribution.set_default_validate_args(True)
    yield
    TD.Distribution.set_default_validate_args(theirs)
    D.Distribution.set_default_validate_args(ours)

TOLS = {"float64": (1e-9, 1e-9), "float32": (2e-5, 2e-5)}


def pair(values, dtype="float64", requires_grad=False):
    """The same values as a torch and a kiln tensor."""
    t = torch.tensor(values, dtype=getattr(torch, dtype))
    k = to_kiln(t)
    if requires_grad:
        t.requires_grad_()
        k.requires_grad_()
    return t, k


def close(k, t, dtype="float64", atol=None, rtol=None):
    a, r = TOLS[dtype]
    kt = to_torch(k).to(torch.float64)
    torch.testing.assert_close(
        kt, t.detach().to(torch.float64), atol=atol or a, rtol=rtol or r, equal_nan=True
    )
    assert tuple(k.shape) == tuple(t.shape)


def build(name, params, dtype="float64", requires_grad=False):
    """Matching torch and kiln distributions; ``params`` maps kwarg -> list (or number)."""
    tk, kk = {}, {}
    for key, value in params.items():
        if isinstance(value, (int, float)):
            tk[key] = kk[key] = value
        else:
            tk[key], kk[key] = pair(value, dtype, requires_grad)
    return getattr(TD, name)(**tk), getattr(D, name)(**kk), tk, kk


# name, params, values inside the support
UNIVARIATE = [
    ("Normal", {"loc": [0.3, -1.2, 2.0], "scale": [0.5, 2.0, 1.0]}, [0.1, 0.7, -3.0]),
    ("Laplace", {"loc": [0.3, -1.2, 2.0], "scale": [0.5, 2.0, 1.0]}, [0.1, 0.7, -3.0]),
    ("Cauchy", {"loc": [0.3, -1.2, 2.0], "scale": [0.5, 2.0, 1.0]}, [0.1, 0.7, -3.0]),
    ("Gumbel", {"loc": [0.3, -1.2, 2.0], "scale": [0.5, 2.0, 1.0]}, [0.1, 0.7, 1.5]),
    ("LogNormal", {"loc": [0.3, -1.2, 2.0], "scale": [0.5, 2.0, 1.0]}, [0.1, 0.7, 3.0]),
    (
        "StudentT",
        {"df": [3.0, 1.5, 0.8], "loc": [0.3, -1.2, 2.0], "scale": [0.5, 2.0, 1.0]},
        [0.1, 0.7, -3.0],
    ),
    ("Uniform", {"low": [0.0, -2.0, 1.0], "high": [1.0, 3.0, 1.5]}, [0.5, 2.9, 1.0]),
    ("Exponential", {"rate": [0.5, 2.0, 1.0]}, [0.1, 0.7, 3.0]),
    ("Gamma", {"concentration": [0.5, 3.0, 12.0], "rate": [0.5, 2.0, 1.0]}, [0.1, 0.7, 13.0]),
    ("Chi2", {"df": [0.8, 3.0, 12.0]}, [0.1, 0.7, 13.0]),
    ("Beta", {"concentration1": [0.5, 3.0, 2.0], "concentration0": [0.7, 2.0, 9.0]},
     [0.1, 0.7, 0.999]),
    ("Poisson", {"rate": [0.5, 2.0, 30.0]}, [0.0, 3.0, 25.0]),
    ("Bernoulli", {"probs": [0.2, 0.5, 0.9]}, [0.0, 1.0, 1.0]),
    ("Bernoulli", {"logits": [-2.0, 0.0, 3.0]}, [0.0, 1.0, 1.0]),
    ("Binomial", {"total_count": 10, "probs": [0.2, 0.5, 0.9]}, [0.0, 4.0, 10.0]),
    ("Binomial", {"total_count": 7, "logits": [-2.0, 0.0, 3.0]}, [0.0, 4.0, 7.0]),
]


def _ids(cases):
    return [f"{c[0]}-{'-'.join(c[1])}" for c in cases]


def _maybe(fn):
    try:
        return fn()
    except NotImplementedError:
        return None


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name, params, values", UNIVARIATE, ids=_ids(UNIVARIATE))
def test_univariate_values(name, params, values, dtype):
    td, kd, _, _ = build(name, params, dtype)
    tv, kv = pair(values, dtype)
    assert kd.batch_shape == td.batch_shape and kd.event_shape == td.event_shape
    assert kd.has_rsample == td.has_rsample
    close(kd.log_prob(kv), td.log_prob(tv), dtype)
    for attr in ["mean", "variance", "stddev", "mode"]:
        expected = _maybe(lambda a=attr: getattr(td, a))
        if expected is not None:
            close(getattr(kd, attr), expected, dtype)
    expected = _maybe(td.entropy)
    if expected is None:
        with pytest.raises(NotImplementedError):
            kd.entropy()
    else:
        close(kd.entropy(), expected, dtype)
    expected = _maybe(lambda: td.cdf(tv))
    if expected is not None:
        close(kd.cdf(kv), expected, dtype, atol=1e-6 if dtype == "float32" else None)
    tq, kq = pair([0.05, 0.5, 0.9], dtype)
    expected = _maybe(lambda: td.icdf(tq))
    if expected is not None:
        close(kd.icdf(kq), expected, dtype, rtol=1e-4 if dtype == "float32" else None)


@pytest.mark.parametrize("name, params, values", UNIVARIATE, ids=_ids(UNIVARIATE))
def test_univariate_log_prob_grad(name, params, values):
    td, kd, tk, kk = build(name, params, requires_grad=True)
    tv, kv = pair(values)
    weights = [1.0, -0.5, 2.0]
    t_loss = (td.log_prob(tv) * torch.tensor(weights, dtype=torch.float64)).sum()
    k_loss = (kd.log_prob(kv) * kiln.tensor(weights, dtype=kiln.float64)).sum()
    names = [n for n in tk if isinstance(tk[n], torch.Tensor)]
    t_grads = torch.autograd.grad(t_loss, [tk[n] for n in names])
    k_grads = kiln.autograd.grad(k_loss, [kk[n] for n in names])
    for kg, tg in zip(k_grads, t_grads, strict=True):
        close(kg, tg, atol=1e-8, rtol=1e-8)


def test_gamma_cdf_grad_in_value_and_rate():
    td, kd, tk, kk = build("Gamma", {"concentration": [0.5, 3.0, 40.0], "rate": [0.5, 2.0, 1.0]})
    tv, kv = pair([0.3, 1.2, 38.0], requires_grad=True)
    kr = kk["rate"].detach().requires_grad_()
    tr = tk["rate"].detach().requires_grad_()
    k_cdf = D.Gamma(kk["concentration"], kr).cdf(kv)
    t_cdf = TD.Gamma(tk["concentration"], tr).cdf(tv)
    close(k_cdf, t_cdf)
    for kg, tg in zip(
        kiln.autograd.grad(k_cdf.sum(), [kv, kr]),
        torch.autograd.grad(t_cdf.sum(), [tv, tr]),
        strict=True,
    ):
        close(kg, tg, atol=1e-9, rtol=1e-7)


# ---- categorical family --------------------------------------------------------------------------

PROBS = [[0.2, 0.3, 0.5], [0.6, 0.0, 0.4]]
LOGITS = [[0.2, -1.3, 0.5], [2.0, 0.1, -4.0]]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", ["Categorical", "OneHotCategorical"])
@pytest.mark.parametrize("param", ["probs", "logits"])
def test_categorical_values(name, param, dtype):
    td, kd, _, _ = build(name, {param: PROBS if param == "probs" else LOGITS}, dtype)
    assert kd.batch_shape == td.batch_shape and kd.event_shape == td.event_shape
    close(kd.probs, td.probs, dtype)
    close(kd.logits, td.logits, dtype)
    close(kd.entropy(), td.entropy(), dtype)
    close(kd.enumerate_support().to(kiln.float64), td.enumerate_support().double(), dtype)
    values = [[2, 0], [1, 2]] if name == "Categorical" else [[[0, 0, 1], [1, 0, 0]]]
    tv, kv = pair(values, "int64" if name == "Categorical" else dtype)
    close(kd.log_prob(kv), td.log_prob(tv), dtype)
    if name == "OneHotCategorical":
        close(kd.mean, td.mean, dtype)
        close(kd.variance, td.variance, dtype)
        close(kd.mode, td.mode, dtype)
    else:
        assert kd.mode.tolist() == td.mode.tolist()
        assert bool(kiln.isnan(kd.mean).all()) and tuple(kd.mean.shape) == (2,)


def test_categorical_log_prob_grad_logits():
    tl, kl = pair(LOGITS, requires_grad=True)
    tv, kv = pair([[2, 0], [1, 2], [0, 0]], "int64")
    td, kd = TD.Categorical(logits=tl), D.Categorical(logits=kl)
    t_loss = td.log_prob(tv).sum() + td.entropy().sum()
    k_loss = kd.log_prob(kv).sum() + kd.entropy().sum()
    close(kiln.autograd.grad(k_loss, kl)[0], torch.autograd.grad(t_loss, tl)[0])


@pytest.mark.parametrize("name", ["Bernoulli", "Binomial"])
def test_enumerate_support(name):
    params = {"probs": [0.2, 0.7]}
    if name == "Binomial":
        params["total_count"] = 4
    td, kd, _, _ = build(name, params)
    close(kd.enumerate_support(), td.enumerate_support())
    close(kd.enumerate_support(expand=False), td.enumerate_support(expand=False))
    if name == "Binomial":
        close(kd.entropy(), td.entropy())


# ---- multivariate --------------------------------------------------------------------------------


def _spd(n, batch=(), seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=g, dtype=torch.float64)
    return a @ a.mT + n * torch.eye(n, dtype=torch.float64)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_multivariate_normal_values(param, dtype):
    tdt = getattr(torch, dtype)
    cov = _spd(3, (2,))
    mats = {
        "covariance_matrix": cov,
        "precision_matrix": torch.linalg.inv(cov),
        "scale_tril": torch.linalg.cholesky(cov),
    }
    t_mat = mats[param].to(tdt)
    t_loc = torch.tensor([0.5, -1.0, 2.0], dtype=tdt)  # broadcast against the (2,) batch
    td = TD.MultivariateNormal(t_loc, **{param: t_mat})
    kd = D.MultivariateNormal(to_kiln(t_loc), **{param: to_kiln(t_mat)})
    assert kd.batch_shape == (2,) and kd.event_shape == (3,)
    value = torch.randn(4, 1, 3, generator=torch.Generator().manual_seed(1), dtype=tdt)
    rtol = 1e-4 if dtype == "float32" else None
    close(kd.log_prob(to_kiln(value)), td.log_prob(value), dtype, rtol=rtol)
    close(kd.entropy(), td.entropy(), dtype, rtol=rtol)
    close(kd.mean, td.mean, dtype)
    close(kd.variance, td.variance, dtype, rtol=rtol)
    for attr in ["scale_tril", "covariance_matrix", "precision_matrix"]:
        close(getattr(kd, attr), getattr(td, attr), dtype, rtol=rtol, atol=1e-5)


def test_multivariate_normal_grads():
    cov = _spd(3)
    t_loc, k_loc = pair([0.5, -1.0, 2.0], requires_grad=True)
    t_cov, k_cov = cov.clone().requires_grad_(), to_kiln(cov).requires_grad_()
    value = torch.randn(5, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    t_loss = TD.MultivariateNormal(t_loc, t_cov).log_prob(value).sum()
    k_loss = D.MultivariateNormal(k_loc, k_cov).log_prob(to_kiln(value)).sum()
    t_g = torch.autograd.grad(t_loss, [t_loc, t_cov])
    k_g = kiln.autograd.grad(k_loss, [k_loc, k_cov])
    close(k_g[0], t_g[0], atol=1e-8)
    # Only the symmetric part of d/dSigma is determined by a symmetric input.
    close((k_g[1] + k_g[1].mT) / 2, (t_g[1] + t_g[1].mT) / 2, atol=1e-8)


def test_multivariate_normal_rsample_grad_matches_reparameterization():
    L = torch.linalg.cholesky(_spd(3))
    t_loc, k_loc = pair([0.5, -1.0, 2.0], requires_grad=True)
    t_L, k_L = L.clone().requires_grad_(), to_kiln(L).requires_grad_()
    kiln.manual_seed(3)
    x = D.MultivariateNormal(k_loc, scale_tril=k_L).rsample((6,))
    k_g = kiln.autograd.grad((x.sin() * x).sum(), [k_loc, k_L])
    eps = torch.linalg.solve_triangular(L, (to_torch(x) - t_loc.detach()).mT, upper=False).mT
    tx = t_loc + (t_L @ eps.unsqueeze(-1)).squeeze(-1)
    t_g = torch.autograd.grad((tx.sin() * tx).sum(), [t_loc, t_L])
    close(k_g[0], t_g[0], atol=1e-8)
    close(k_g[1].tril(), t_g[1].tril(), atol=1e-8)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_dirichlet_values(dtype):
    td, kd, _, _ = build("Dirichlet", {"concentration": [[0.5, 2.0, 3.0], [4.0, 0.7, 0.9]]}, dtype)
    tv, kv = pair([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], dtype)
    close(kd.log_prob(kv), td.log_prob(tv), dtype)
    for attr in ["mean", "variance", "mode"]:
        close(getattr(kd, attr), getattr(td, attr), dtype)
    close(kd.entropy(), td.entropy(), dtype, rtol=1e-4 if dtype == "float32" else None)


def test_independent_and_mixture():
    t_loc, k_loc = pair([[0.0, 1.0, -1.0], [2.0, 0.5, 0.3]], requires_grad=True)
    t_sc, k_sc = pair([[1.0, 0.5, 2.0], [0.3, 1.5, 0.7]])
    ti = TD.Independent(TD.Normal(t_loc, t_sc), 1)
    ki = D.Independent(D.Normal(k_loc, k_sc), 1)
    assert ki.batch_shape == (2,) and ki.event_shape == (3,)
    value = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    close(ki.log_prob(to_kiln(value)), ti.log_prob(value))
    close(ki.entropy(), ti.entropy())
    assert ki.support.event_dim == 1 and ki.has_rsample

    t_mix, k_mix = pair([0.2, 0.5, 0.3], requires_grad=True)
    tm = TD.MixtureSameFamily(TD.Categorical(probs=t_mix), TD.Normal(t_loc[0], t_sc[0]))
    km = D.MixtureSameFamily(D.Categorical(probs=k_mix), D.Normal(k_loc[0], k_sc[0]))
    xs = torch.linspace(-3, 3, 7, dtype=torch.float64)
    close(km.log_prob(to_kiln(xs)), tm.log_prob(xs))
    close(km.cdf(to_kiln(xs)), tm.cdf(xs))
    close(km.mean, tm.mean)
    close(km.variance, tm.variance)
    t_g = torch.autograd.grad(tm.log_prob(xs).sum(), [t_loc, t_mix])
    k_g = kiln.autograd.grad(km.log_prob(to_kiln(xs)).sum(), [k_loc, k_mix])
    for kg, tg in zip(k_g, t_g, strict=True):
        close(kg, tg)

    # Mixture of diagonal 2-D Gaussians with a batch dim.
    comp_t = TD.Independent(TD.Normal(t_loc.detach().reshape(1, 3, 2), 1.0), 1)
    comp_k = D.Independent(D.Normal(k_loc.detach().reshape(1, 3, 2), 1.0), 1)
    tm2 = TD.MixtureSameFamily(TD.Categorical(probs=t_mix.detach()), comp_t)
    km2 = D.MixtureSameFamily(D.Categorical(probs=k_mix.detach()), comp_k)
    v2 = torch.randn(5, 1, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    close(km2.log_prob(to_kiln(v2)), tm2.log_prob(v2))
    comp_k3 = D.Independent(D.Normal(k_loc.detach().reshape(3, 2), 1.0), 1)
    km3 = D.MixtureSameFamily(D.Categorical(probs=k_mix.detach()), comp_k3)
    assert tuple(km3.sample((5,)).shape) == (5, 2)


def test_transformed_distributions():
    t_loc, k_loc = pair([0.2, -1.0], requires_grad=True)
    t_sc, k_sc = pair([0.7, 1.3])
    td = TD.TransformedDistribution(
        TD.Normal(t_loc, t_sc), [TD.transforms.TanhTransform(), TD.transforms.AffineTransform(1, 2)]
    )
    kd = D.TransformedDistribution(
        D.Normal(k_loc, k_sc), [D.transforms.TanhTransform(), D.transforms.AffineTransform(1, 2)]
    )
    tv, kv = pair([0.5, 2.1])
    close(kd.log_prob(kv), td.log_prob(tv))
    close(kd.cdf(kv), td.cdf(tv))
    close(kiln.autograd.grad(kd.log_prob(kv).sum(), k_loc)[0],
          torch.autograd.grad(td.log_prob(tv).sum(), t_loc)[0])
    td2 = TD.TransformedDistribution(TD.Uniform(0.0, 1.0), TD.transforms.SigmoidTransform().inv)
    kd2 = D.TransformedDistribution(D.Uniform(0.0, 1.0), D.transforms.SigmoidTransform().inv)
    tv2, kv2 = pair([-2.0, 0.3, 4.0])
    close(kd2.log_prob(kv2), td2.log_prob(tv2), atol=1e-6)
    # cache_size=1 returns the exact pre-image of a sample, even where atanh would overflow.
    tanh = D.transforms.TanhTransform(cache_size=1)
    x = kiln.tensor([30.0], dtype=kiln.float64)
    assert tanh.inv(tanh(x)) is x


# ---- reparameterized sampling --------------------------------------------------------------------


LOC_SCALE = ["Normal", "Laplace", "Cauchy", "LogNormal"]


@pytest.mark.parametrize("name", LOC_SCALE)
def test_loc_scale_rsample_grad(name):
    """Gradients of f(rsample) equal those of loc + scale * eps with the draw's own eps."""
    t_loc, k_loc = pair([0.3, -1.0], requires_grad=True)
    t_sc, k_sc = pair([0.5, 2.0], requires_grad=True)
    kiln.manual_seed(0)
    kd = getattr(D, name)(k_loc, k_sc)
    x = kd.rsample((5,))
    assert tuple(x.shape) == (5, 2) and x.requires_grad
    k_g = kiln.autograd.grad((x * x.tanh()).sum(), [k_loc, k_sc])
    xt = to_torch(x)
    if name == "LogNormal":
        eps = (xt.log() - t_loc.detach()) / t_sc.detach()
        tx = (t_loc + t_sc * eps).exp()
    else:
        eps = (xt - t_loc.detach()) / t_sc.detach()
        tx = t_loc + t_sc * eps
    t_g = torch.autograd.grad((tx * tx.tanh()).sum(), [t_loc, t_sc])
    for kg, tg in zip(k_g, t_g, strict=True):
        close(kg, tg, atol=1e-8, rtol=1e-7)


def test_uniform_and_exponential_rsample_grad():
    t_lo, k_lo = pair([0.0, -2.0], requires_grad=True)
    t_hi, k_hi = pair([1.0, 3.0], requires_grad=True)
    kiln.manual_seed(1)
    x = D.Uniform(k_lo, k_hi).rsample((4,))
    u = (to_torch(x) - t_lo.detach()) / (t_hi - t_lo).detach()
    t_g = torch.autograd.grad((t_lo + u * (t_hi - t_lo)).pow(2).sum(), [t_lo, t_hi])
    k_g = kiln.autograd.grad(x.pow(2).sum(), [k_lo, k_hi])
    for kg, tg in zip(k_g, t_g, strict=True):
        close(kg, tg)
    t_rate, k_rate = pair([0.5, 3.0], requires_grad=True)
    y = D.Exponential(k_rate).rsample((4,))
    e = to_torch(y) * t_rate.detach()
    expected = torch.autograd.grad((e / t_rate).sum(), t_rate)[0]
    close(kiln.autograd.grad(y.sum(), k_rate)[0], expected)


def test_gamma_rsample_grad_is_torchs_implicit_gradient():
    alpha = [0.05, 0.6, 1.0, 3.5, 9.0, 150.0]
    t_a, k_a = pair(alpha, requires_grad=True)
    t_r, k_r = pair([1.0, 2.0, 0.5, 1.5, 1.0, 3.0], requires_grad=True)
    kiln.manual_seed(2)
    x = D.Gamma(k_a, k_r).rsample((50,))
    k_ga, k_gr = kiln.autograd.grad(x.sum(), [k_a, k_r])
    std = to_torch(x) * t_r.detach()  # the standard-gamma draw
    dx_da = torch._standard_gamma_grad(t_a.detach().expand_as(std), std)
    close(k_ga, (dx_da / t_r.detach()).sum(0), rtol=1e-7, atol=1e-10)
    close(k_gr, (-std / t_r.detach() ** 2).sum(0), rtol=1e-7)


@pytest.mark.parametrize("conc", [[0.3, 0.5, 2.0], [10.0, 12.0, 7.0], [0.05, 4.0], [50.0, 3.0]])
def test_dirichlet_rsample_grad_is_torchs_implicit_gradient(conc):
    t_c, k_c = pair(conc, requires_grad=True)
    kiln.manual_seed(3)
    x = D.Dirichlet(k_c).rsample((200,))
    weights = torch.linspace(-1, 1, len(conc), dtype=torch.float64)
    k_g = kiln.autograd.grad((x * to_kiln(weights)).sum(), k_c)[0]
    xt = to_torch(x)
    c = t_c.detach().expand_as(xt)
    grad = torch._dirichlet_grad(xt, c, c.sum(-1, True).expand_as(c))
    go = weights.expand_as(xt)
    expected = (grad * (go - (xt * go).sum(-1, True))).sum(0)
    close(k_g, expected, rtol=1e-7, atol=1e-10)
    # Beta draws are the first coordinate of a 2-component Dirichlet.
    if len(conc) == 2:
        b = D.Beta(k_c[0], k_c[1]).rsample((10,))
        assert b.requires_grad and tuple(b.shape) == (10,)


def test_studentt_rsample_is_differentiable():
    df = kiln.tensor([3.0, 8.0], dtype=kiln.float64, requires_grad=True)
    loc = kiln.tensor([0.0, 1.0], dtype=kiln.float64, requires_grad=True)
    x = D.StudentT(df, loc, 2.0).rsample((100,))
    grads = kiln.autograd.grad(x.pow(2).mean(), [df, loc])
    assert all(bool(kiln.isfinite(g).all()) for g in grads)


def test_sample_has_no_grad_and_straight_through():
    loc = kiln.tensor([0.0, 1.0], requires_grad=True)
    assert not D.Normal(loc, 1.0).sample((3,)).requires_grad
    logits = kiln.tensor([[0.1, 0.2, 0.3]], requires_grad=True)
    y = D.OneHotCategoricalStraightThrough(logits=logits).rsample((4,))
    assert bool(((y == 0) | (y == 1)).all())
    g = kiln.autograd.grad((y * kiln.tensor([1.0, 2.0, 3.0])).sum(), logits)[0]
    assert g.abs().sum().item() > 0


# ---- shapes --------------------------------------------------------------------------------------


SHAPE_CASES = [
    (D.Normal, {"loc": [[0.0, 1.0, 2.0]] * 2, "scale": 1.0}, (2, 3), ()),
    (D.Gamma, {"concentration": [[0.5, 1.0, 2.0]] * 2, "rate": 2.0}, (2, 3), ()),
    (D.Beta, {"concentration1": [1.0, 2.0], "concentration0": [3.0, 0.5]}, (2,), ()),
    (D.Poisson, {"rate": [1.0, 20.0]}, (2,), ()),
    (D.Binomial, {"total_count": 5, "probs": [0.3, 0.9]}, (2,), ()),
    (D.Bernoulli, {"probs": [0.3, 0.9]}, (2,), ()),
    (D.Categorical, {"logits": [[0.0, 1.0, 2.0]] * 2}, (2,), ()),
    (D.OneHotCategorical, {"probs": [[0.2, 0.3, 0.5]] * 2}, (2,), (3,)),
    (D.Dirichlet, {"concentration": [[1.0, 2.0, 3.0]] * 2}, (2,), (3,)),
    (D.StudentT, {"df": [3.0, 4.0]}, (2,), ()),
    (D.Gumbel, {"loc": [0.0, 1.0], "scale": 2.0}, (2,), ()),
    (D.LogNormal, {"loc": [0.0, 1.0], "scale": 2.0}, (2,), ()),
    (D.Exponential, {"rate": [1.0, 2.0]}, (2,), ()),
    (D.Laplace, {"loc": [0.0, 1.0], "scale": 2.0}, (2,), ()),
    (D.Cauchy, {"loc": [0.0, 1.0], "scale": 2.0}, (2,), ()),
    (D.Uniform, {"low": [0.0, 1.0], "high": 2.0}, (2,), ()),
]


@pytest.mark.parametrize("cls, params, batch, event", SHAPE_CASES,
                         ids=[c[0].__name__ for c in SHAPE_CASES])
def test_shapes_and_expand(cls, params, batch, event):
    kw = {k: v if isinstance(v, (int, float)) else kiln.tensor(v) for k, v in params.items()}
    d = cls(**kw)
    assert isinstance(d.batch_shape, kiln.Size) and d.batch_shape == batch
    assert isinstance(d.event_shape, kiln.Size) and d.event_shape == event
    for sample_shape in [(), (5,), (2, 3)]:
        s = d.sample(sample_shape)
        assert tuple(s.shape) == tuple(sample_shape) + batch + event
        assert tuple(d.log_prob(s).shape) == tuple(sample_shape) + batch
    e = d.expand((4,) + batch)
    assert e.batch_shape == (4,) + batch and e.event_shape == event
    s = d.sample()
    close(e.log_prob(s), to_torch(d.log_prob(s)).expand((4,) + batch))
    assert tuple(e.sample((3,)).shape) == (3, 4) + batch + event
    ind = D.Independent(d, 1)
    assert ind.batch_shape == batch[:-1] and ind.event_shape == batch[-1:] + event
    close(ind.log_prob(s), to_torch(d.log_prob(s)).sum(-1))


def test_scalar_parameters_give_empty_batch_shape():
    for d in [D.Normal(0.0, 1.0), D.Gamma(2.0, 1.0), D.Beta(2.0, 3.0), D.Bernoulli(0.3),
              D.Exponential(1.0), D.Poisson(3.0), D.Uniform(0.0, 1.0), D.Gumbel(0.0, 1.0)]:
        assert d.batch_shape == () and tuple(d.sample().shape) == ()
        assert tuple(d.sample((7,)).shape) == (7,)
        assert d.log_prob(d.sample()).dtype == kiln.float32


# ---- sample statistics ---------------------------------------------------------------------------

N = 100_000


def _moments(cls, kw, n=N, seed=0):
    kiln.manual_seed(seed)
    d = cls(**{k: kiln.tensor(v, dtype=kiln.float64) for k, v in kw.items()})
    x = d.sample((n,)).to(kiln.float64).numpy()
    return d, x.mean(0), x.var(0)


STAT_CASES = [
    (D.Normal, {"loc": [0.3, -2.0], "scale": [0.5, 3.0]}),
    (D.Uniform, {"low": [0.0, -2.0], "high": [1.0, 5.0]}),
    (D.Exponential, {"rate": [0.5, 4.0]}),
    (D.Laplace, {"loc": [0.3, -2.0], "scale": [0.5, 3.0]}),
    (D.Gumbel, {"loc": [0.3, -2.0], "scale": [0.5, 3.0]}),
    (D.LogNormal, {"loc": [0.3, -1.0], "scale": [0.5, 0.3]}),
    (D.Gamma, {"concentration": [0.05, 0.4, 1.0, 3.5, 250.0], "rate": [1.0, 2.0, 0.5, 1.0, 3.0]}),
    (D.Chi2, {"df": [1.0, 7.0]}),
    (D.Beta, {"concentration1": [0.3, 2.0, 40.0], "concentration0": [0.6, 5.0, 10.0]}),
    (D.StudentT, {"df": [5.0, 12.0], "loc": [1.0, -1.0], "scale": [2.0, 0.5]}),
    (D.Poisson, {"rate": [0.0, 0.3, 4.0, 9.99, 10.0, 57.0, 4000.0]}),
    (D.Binomial, {"total_count": [10.0, 10.0, 100.0, 100.0, 1000.0, 0.0],
                  "probs": [0.3, 0.95, 0.2, 0.85, 0.5, 0.5]}),
    (D.Bernoulli, {"probs": [0.1, 0.5, 0.97]}),
    (D.Dirichlet, {"concentration": [0.3, 2.0, 7.0]}),
    (D.MultivariateNormal, {"loc": [1.0, -1.0], "covariance_matrix": [[2.0, 0.6], [0.6, 0.5]]}),
]


@pytest.mark.parametrize("cls, kw", STAT_CASES, ids=[c[0].__name__ for c in STAT_CASES])
def test_sample_moments(cls, kw):
    d, mean, var = _moments(cls, kw)
    exp_mean = d.mean.numpy()
    exp_var = d.variance.numpy()
    sd = np.sqrt(exp_var)
    # 6 standard errors for the mean; the variance check uses a generous relative band.
    np.testing.assert_array_less(np.abs(mean - exp_mean), 6 * sd / math.sqrt(N) + 1e-12)
    np.testing.assert_allclose(var, exp_var, rtol=0.05, atol=1e-12)


@pytest.mark.parametrize("cls, kw", [
    (D.Poisson, {"rate": [2.5, 15.0]}),
    (D.Binomial, {"total_count": [12.0, 60.0], "probs": [0.35, 0.7]}),
], ids=["Poisson", "Binomial"])
def test_discrete_sample_frequencies_match_pmf(cls, kw):
    kiln.manual_seed(5)
    d = cls(**{k: kiln.tensor(v, dtype=kiln.float64) for k, v in kw.items()}, validate_args=False)
    x = d.sample((N,)).numpy().astype(np.int64)
    for j in range(x.shape[1]):
        ks = np.arange(0, x[:, j].max() + 1)
        freq = np.bincount(x[:, j], minlength=len(ks)) / N
        pmf = d.log_prob(kiln.tensor(ks, dtype=kiln.float64).unsqueeze(-1)).exp().numpy()[:, j]
        tol = 5 * np.sqrt(pmf * (1 - pmf) / N) + 1e-3
        assert np.all(np.abs(freq - pmf) <= tol), (j, freq, pmf)


def test_categorical_and_mixture_sampling():
    kiln.manual_seed(6)
    probs = kiln.tensor([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]])
    x = D.Categorical(probs=probs).sample((N,)).numpy()
    for j in range(2):
        freq = np.bincount(x[:, j], minlength=3) / N
        np.testing.assert_allclose(freq, probs[j].numpy(), atol=0.01)
    oh = D.OneHotCategorical(probs=probs).sample((N,)).numpy()
    np.testing.assert_allclose(oh.mean(0), probs.numpy(), atol=0.01)
    mix = D.MixtureSameFamily(
        D.Categorical(probs=kiln.tensor([0.3, 0.7], dtype=kiln.float64)),
        D.Normal(kiln.tensor([-2.0, 3.0], dtype=kiln.float64), kiln.tensor([0.5, 1.0]).double()),
    )
    s = mix.sample((N,)).numpy()
    assert abs(s.mean() - mix.mean.item()) < 0.05
    assert abs(s.var() - mix.variance.item()) / mix.variance.item() < 0.05


def test_cauchy_quantiles_and_mvn_covariance():
    kiln.manual_seed(7)
    d = D.Cauchy(kiln.tensor(1.0, dtype=kiln.float64), kiln.tensor(2.0, dtype=kiln.float64))
    x = d.sample((N,)).numpy()
    q = np.quantile(x, [0.25, 0.5, 0.75])
    np.testing.assert_allclose(q, d.icdf(kiln.tensor([0.25, 0.5, 0.75]).double()).numpy(),
                               atol=0.05)
    cov = np.array([[2.0, 0.6], [0.6, 0.5]])
    m = D.MultivariateNormal(kiln.zeros(2, dtype=kiln.float64),
                             precision_matrix=kiln.tensor(np.linalg.inv(cov)))
    s = m.sample((N,)).numpy()
    np.testing.assert_allclose(np.cov(s.T), cov, atol=0.03)


def test_gammainc_matches_torch():
    a = torch.tensor([0.1, 0.5, 1.0, 3.0, 20.0, 500.0, 2.0], dtype=torch.float64)
    x = torch.tensor([0.05, 2.0, 1.0, 0.3, 25.0, 480.0, 0.0], dtype=torch.float64)
    close(_sampling.gammainc(to_kiln(a), to_kiln(x)), torch.special.gammainc(a, x), atol=1e-12)


# ---- KL divergence -------------------------------------------------------------------------------

LS_P = {"loc": [0.0, 1.0], "scale": [1.0, 0.5]}
LS_Q = {"loc": [0.5, -1.0], "scale": [2.0, 0.7]}
KL_CASES = [
    ("Normal", LS_P, LS_Q),
    ("Categorical", {"probs": [[0.2, 0.8], [0.5, 0.5]]}, {"logits": [[0.1, 0.3], [-2.0, 1.0]]}),
    ("OneHotCategorical", {"probs": [[0.2, 0.8]]}, {"probs": [[0.6, 0.4]]}),
    ("Bernoulli", {"probs": [0.2, 0.7, 0.0]}, {"logits": [0.3, -1.0, 0.5]}),
    ("Uniform", {"low": [0.0, -1.0], "high": [1.0, 2.0]}, {"low": [-1.0, 0.0], "high": [2.0, 3.0]}),
    ("Beta", {"concentration1": [0.5, 3.0], "concentration0": [2.0, 1.5]},
     {"concentration1": [1.5, 0.7], "concentration0": [4.0, 2.0]}),
    ("Gamma", {"concentration": [0.5, 3.0], "rate": [2.0, 1.5]},
     {"concentration": [1.5, 0.7], "rate": [4.0, 2.0]}),
    ("Dirichlet", {"concentration": [[0.5, 3.0, 1.0]]}, {"concentration": [[1.5, 0.7, 2.0]]}),
    ("Exponential", {"rate": [0.5, 3.0]}, {"rate": [1.5, 0.7]}),
    ("Laplace", LS_P, LS_Q),
    ("Poisson", {"rate": [0.5, 3.0]}, {"rate": [1.5, 0.7]}),
    ("Binomial", {"total_count": 5, "probs": [0.3, 0.6]}, {"total_count": 5, "probs": [0.5, 0.1]}),
    ("Gumbel", LS_P, LS_Q),
    ("Cauchy", LS_P, LS_Q),
    ("LogNormal", LS_P, LS_Q),
    ("Normal|Laplace", LS_P, LS_Q),
    ("Laplace|Normal", LS_P, LS_Q),
    ("Gamma|Exponential", {"concentration": [0.5, 3.0], "rate": [2.0, 1.5]}, {"rate": [4.0, 2.0]}),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name, p_params, q_params", KL_CASES, ids=[c[0] for c in KL_CASES])
def test_kl_divergence(name, p_params, q_params, dtype):
    p_name, q_name = name.split("|") if "|" in name else (name, name)
    tp, kp, tpk, kpk = build(p_name, p_params, dtype, requires_grad=dtype == "float64")
    tq, kq, _, _ = build(q_name, q_params, dtype)
    t_kl = TD.kl_divergence(tp, tq)
    k_kl = D.kl_divergence(kp, kq)
    close(k_kl, t_kl, dtype, rtol=1e-4 if dtype == "float32" else None)
    if dtype == "float64":
        names = [n for n, v in tpk.items() if isinstance(v, torch.Tensor)]
        finite = torch.isfinite(t_kl)
        t_g = torch.autograd.grad(t_kl[finite].sum(), [tpk[n] for n in names])
        k_g = kiln.autograd.grad(k_kl[kiln.isfinite(k_kl)].sum(), [kpk[n] for n in names])
        for kg, tg in zip(k_g, t_g, strict=True):
            close(kg, tg, atol=1e-8, rtol=1e-7)


def test_kl_multivariate_normal_and_independent():
    cov_p, cov_q = _spd(3, (2,), seed=1), _spd(3, seed=2)
    t_loc, k_loc = pair([[0.0, 1.0, -1.0], [0.5, 0.5, 0.5]])
    tp = TD.MultivariateNormal(t_loc, cov_p)
    L_q = torch.linalg.cholesky(cov_q)
    tq = TD.MultivariateNormal(torch.zeros(3, dtype=torch.float64), scale_tril=L_q)
    kp = D.MultivariateNormal(k_loc, to_kiln(cov_p))
    kq = D.MultivariateNormal(kiln.zeros(3, dtype=kiln.float64), scale_tril=to_kiln(L_q))
    close(D.kl_divergence(kp, kq), TD.kl_divergence(tp, tq))
    close(D.kl_divergence(kq, kp), TD.kl_divergence(tq, tp))
    ti = TD.Independent(TD.Normal(t_loc, 1.0), 1)
    ki = D.Independent(D.Normal(k_loc, 1.0), 1)
    tj = TD.Independent(TD.Normal(t_loc * 2, 3.0), 1)
    kj = D.Independent(D.Normal(k_loc * 2, 3.0), 1)
    close(D.kl_divergence(ki, kj), TD.kl_divergence(ti, tj))


def test_register_kl_and_missing_pair():
    class MyNormal(D.Normal):
        pass

    @D.register_kl(MyNormal, MyNormal)
    def _kl(p, q):
        return kiln.zeros(p.batch_shape)

    a = MyNormal(kiln.tensor([0.0]), kiln.tensor([1.0]))
    b = MyNormal(kiln.tensor([1.0]), kiln.tensor([1.0]))
    assert D.kl_divergence(a, b).tolist() == [0.0]
    # The parent's rule still applies to a mixed pair.
    assert D.kl_divergence(a, D.Normal(kiln.tensor([1.0]), 1.0)).item() == pytest.approx(0.5)
    with pytest.raises(NotImplementedError, match="No KL"):
        D.kl_divergence(D.Cauchy(0.0, 1.0), D.Poisson(1.0))


# ---- validation ----------------------------------------------------------------------------------


def _first_line(err):
    line = str(err.value).split("\n")[0]
    return line.replace("torch.Size", "kiln.Size").replace("torch.float", "kiln.float")


@pytest.mark.parametrize("name, params", [
    ("Normal", {"loc": [0.0, 1.0], "scale": [1.0, -1.0]}),
    ("Gamma", {"concentration": [0.0, 1.0], "rate": [1.0, 1.0]}),
    ("Bernoulli", {"probs": [0.5, 1.5]}),
    ("Categorical", {"probs": [[0.5, -0.5]]}),
    ("Uniform", {"low": [0.0, 2.0], "high": [1.0, 1.0]}),
    ("Dirichlet", {"concentration": [[1.0, 0.0]]}),
    ("MultivariateNormal", {"loc": [0.0, 0.0], "covariance_matrix": [[1.0, 2.0], [2.0, 1.0]]}),
    ("MultivariateNormal", {"loc": [0.0, 0.0], "scale_tril": [[1.0, 0.0], [2.0, -1.0]]}),
])
def test_invalid_parameters_raise_like_torch(name, params):
    with pytest.raises(ValueError) as t_err:
        build(name, params)  # torch raises first, so this checks torch's message too
    with pytest.raises(ValueError) as k_err:
        getattr(D, name)(**{k: kiln.tensor(v, dtype=kiln.float64) for k, v in params.items()})
    assert _first_line(k_err) == _first_line(t_err)


def test_invalid_values_and_switches():
    d = D.Exponential(kiln.tensor([1.0, 2.0]))
    td = TD.Exponential(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError) as k_err:
        d.log_prob(kiln.tensor([1.0, -1.0]))
    with pytest.raises(ValueError) as t_err:
        td.log_prob(torch.tensor([1.0, -1.0]))
    assert _first_line(k_err) == _first_line(t_err)
    with pytest.raises(ValueError, match="must be a Tensor"):
        d.log_prob(1.0)
    with pytest.raises(ValueError, match="not broadcastable"):
        d.log_prob(kiln.ones(3))
    with pytest.raises(ValueError, match="right-most size of value must match event_shape"):
        D.Dirichlet(kiln.ones(3)).log_prob(kiln.ones(2) / 2)
    with pytest.raises(ValueError, match="Either `probs` or `logits`"):
        D.Bernoulli(probs=kiln.tensor(0.5), logits=kiln.tensor(0.0))
    with pytest.raises(ValueError, match="Exactly one of"):
        D.MultivariateNormal(kiln.zeros(2))
    # Per-instance and global switches.
    D.Normal(kiln.tensor([0.0]), kiln.tensor([-1.0]), validate_args=False)
    assert D.Exponential(kiln.tensor([1.0]), validate_args=False).log_prob(
        kiln.tensor([-1.0])).item() == pytest.approx(1.0)
    try:
        D.Distribution.set_default_validate_args(False)
        D.Normal(kiln.tensor([0.0]), kiln.tensor([-1.0]))
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Normal(kiln.tensor([0.0]), kiln.tensor([-1.0]))
    with pytest.raises(ValueError):
        D.Distribution.set_default_validate_args("yes")


def test_constraints_and_module_access():
    c = D.constraints
    assert bool(c.positive.check(kiln.tensor(1.0))) and not bool(c.positive.check(kiln.tensor(0.0)))
    assert c.simplex.check(kiln.tensor([[0.2, 0.8], [0.5, 0.6]])).tolist() == [True, False]
    assert c.positive_definite.check(kiln.tensor([[[2.0, 0.0], [0.0, 1.0]],
                                                  [[1.0, 2.0], [2.0, 1.0]]])).tolist() == [True,
                                                                                           False]
    assert c.lower_cholesky.check(kiln.tensor([[1.0, 0.0], [3.0, 2.0]])).item()
    assert c.integer_interval(0, 3).check(kiln.tensor([0.0, 3.0, 1.5])).tolist() == [True, True,
                                                                                      False]
    assert repr(c.greater_than(1.0)) == repr(TD.constraints.greater_than(1.0))
    assert repr(D.Normal.arg_constraints["scale"]) == repr(TD.Normal.arg_constraints["scale"])
    assert c.is_dependent(D.Uniform.support) and not c.is_dependent(c.real)
    assert kiln.distributions is D and D.Normal(0.0, 1.0).perplexity().item() > 0
