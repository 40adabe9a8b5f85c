"""Calls decomposed into graph ops at capture (decompose.py, decompositions_*.py) compile into one
part with no eager node, equal to their eager kernels over dtypes, layouts and reductions, with
symbolic sizes, and train compiled (their gradients from the graph ops' rules) equal to eager
autograd. A call a decomposition cannot express stays an eager node with the reason."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled
from test_compiled_training_ops import grads_match

import kiln
import kiln.nn.functional as F


def prob(*shape, dtype=kiln.float32, seed=0):
    return rand(*shape, dtype=dtype, seed=seed, low=0.02, high=0.98)


def sign(*shape, seed=0):
    return (rand(*shape, seed=seed) > 0).float() * 2 - 1


# name -> (function, arguments); the first argument is the one training differentiates.
CASES = {
    # windows that vary (7 into 3, 10 into 4); values of a few levels: ties in every window,
    # whose gradient goes to the first maximum only, as eager's
    "adaptive_max_unequal": (lambda x: F.adaptive_max_pool2d(x, (3, 4)),
                             lambda dt: (rand(2, 3, 7, 10, dtype=dt),)),
    "adaptive_max_unequal_ties": (lambda x: F.adaptive_max_pool2d(x, 3),
                                  lambda dt: ((rand(2, 2, 8, 7, dtype=dt) * 2).round(),)),
    "max_unpool2d": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2),
                     lambda dt: (rand(2, 3, 6, 8, dtype=dt),)),
    "bce": (lambda p, t: F.binary_cross_entropy(p, t), lambda dt: (prob(5, 7, dtype=dt),
                                                                    prob(5, 7, dtype=dt, seed=1))),
    "bce_weight_sum": (lambda p, t, w: F.binary_cross_entropy(p, t, weight=w, reduction="sum"),
                       lambda dt: (prob(5, 7, dtype=dt), prob(5, 7, dtype=dt, seed=1),
                                   prob(7, dtype=dt, seed=2))),
    "bce_none": (lambda p, t: F.binary_cross_entropy(p, t, reduction="none"),
                 lambda dt: (prob(4, 3, dtype=dt), (prob(4, 3, dtype=dt, seed=1) > 0.5).to(dt))),
    "bce_logits": (lambda x, t: F.binary_cross_entropy_with_logits(x * 8, t),
                   lambda dt: (rand(6, 5, dtype=dt), prob(6, 5, dtype=dt, seed=1))),
    "bce_logits_pos_weight": (
        lambda x, t, pw: kiln.binary_cross_entropy_with_logits(x, t, None, pw, 0),
        lambda dt: (rand(6, 5, dtype=dt), prob(6, 5, dtype=dt, seed=1), prob(5, dtype=dt) * 3)),
    "bce_logits_weights": (
        lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, weight=w, pos_weight=pw,
                                                               reduction="sum"),
        lambda dt: (rand(6, 5, dtype=dt), prob(6, 5, dtype=dt, seed=1), prob(6, 1, dtype=dt),
                    prob(5, dtype=dt, seed=3) * 3)),
    "huber": (lambda x, y: F.huber_loss(x, y, delta=0.7),
              lambda dt: (rand(5, 6, dtype=dt), rand(5, 6, dtype=dt, seed=1))),
    "huber_weight_none": (lambda x, y, w: F.huber_loss(x, y, reduction="none", weight=w),
                          lambda dt: (rand(5, 6, dtype=dt), rand(5, 6, dtype=dt, seed=1),
                                      prob(5, 6, dtype=dt))),
    "smooth_l1": (lambda x, y: F.smooth_l1_loss(x, y, beta=0.5, reduction="sum"),
                  lambda dt: (rand(5, 6, dtype=dt), rand(5, 6, dtype=dt, seed=1))),
    "smooth_l1_beta0": (lambda x, y: F.smooth_l1_loss(x, y, beta=0.0),
                        lambda dt: (rand(5, 6, dtype=dt), rand(5, 6, dtype=dt, seed=1))),
    "kl_div_batchmean": (
        lambda x, t: F.kl_div(x.log_softmax(-1), t, reduction="batchmean"),
        lambda dt: (rand(4, 6, dtype=dt), prob(4, 6, dtype=dt).softmax(-1))),
    "kl_div_zero_targets": (
        lambda x, t: F.kl_div(x, t * (t > 0.5), reduction="sum"),
        lambda dt: (rand(4, 6, dtype=dt), prob(4, 6, dtype=dt, seed=1))),
    "kl_div_log_target": (
        lambda x, t: F.kl_div(x, t, reduction="none", log_target=True),
        lambda dt: (rand(3, 4, dtype=dt), rand(3, 4, dtype=dt, seed=1))),
    "glu": (lambda x: F.glu(x, 1) + F.glu(x.transpose(0, 1), 0).t(),
            lambda dt: (rand(6, 8, dtype=dt),)),
    "softmin": (lambda x: F.softmin(x, dim=-1), lambda dt: (rand(4, 5, dtype=dt),)),
    "prelu_channels": (lambda x, w: F.prelu(x, w),
                       lambda dt: (rand(2, 3, 4, 4, dtype=dt), prob(3, dtype=dt))),
    "prelu_one": (lambda x, w: kiln.prelu(x, w),
                  lambda dt: (rand(5, 7, dtype=dt), prob(1, dtype=dt))),
    "instance_norm": (lambda x, w, b: F.instance_norm(x, weight=w, bias=b, eps=1e-3),
                      lambda dt: (rand(2, 3, 5, 4, dtype=dt), rand(3, dtype=dt, seed=1),
                                  rand(3, dtype=dt, seed=2))),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (2, 3)),
                            lambda dt: (rand(2, 3, 6, 9, dtype=dt),)),
    "adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 4),
                            lambda dt: (rand(2, 3, 12, dtype=dt),)),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (1, 2, 2)),
                            lambda dt: (rand(2, 3, 4, 4, 6, dtype=dt),)),
    "bilinear": (lambda x, y, w, b: F.bilinear(x, y, w, b),
                 lambda dt: (rand(4, 5, dtype=dt), rand(4, 3, dtype=dt, seed=1),
                             rand(2, 5, 3, dtype=dt, seed=2), rand(2, dtype=dt, seed=3))),
    "dot_mv": (lambda m, v: kiln.dot(v, v) + m.mv(v).sum() + kiln.vdot(v, v),
               lambda dt: (rand(7, 4, dtype=dt).t(), rand(7, dtype=dt, seed=1))),
    "tile": (lambda x: x.tile((1, 2)).sum(1, keepdim=True) + kiln.tile(x, (2, 1, 1)).sum(0),
             lambda dt: (rand(3, 4, dtype=dt),)),
    "view_as": (lambda x, y: x.view_as(y) * 2, lambda dt: (rand(3, 4, dtype=dt),
                                                          rand(2, 6, dtype=dt))),
    "flips": (lambda x: kiln.fliplr(x) + kiln.flipud(x) * 2, lambda dt: (rand(3, 4, dtype=dt),)),
    "nansum_nanmean": (
        lambda x: kiln.nansum(x.log(), 1) + x.log().nanmean(1) + kiln.nanmean(x.log()),
        lambda dt: (rand(4, 5, dtype=dt),)),
    "isclose": (lambda x, y: kiln.isclose(x, y, rtol=0.1, atol=0.05),
                lambda dt: (rand(6, 5, dtype=dt),
                            rand(6, 5, dtype=dt) + rand(6, 5, dtype=dt, seed=1) * 0.2)),
    "count_nonzero": (lambda x: kiln.count_nonzero(x.relu(), dim=1) + kiln.count_nonzero(x),
                      lambda dt: (rand(4, 6, dtype=dt),)),
    "aminmax": (lambda x: kiln.aminmax(x, dim=0, keepdim=True), lambda dt: (rand(4, 6, dtype=dt),)),
    "std_var_mean": (lambda x: (*kiln.std_mean(x, 1), *kiln.var_mean(x, [0], correction=0)),
                     lambda dt: (rand(4, 6, dtype=dt),)),
    "repeat_interleave": (lambda x: x.repeat_interleave(3, dim=1) + 1,
                          lambda dt: (rand(2, 4, dtype=dt),)),
    "repeat_interleave_flat": (lambda x: kiln.repeat_interleave(x, 2) * 2,
                               lambda dt: (rand(2, 3, dtype=dt),)),
    "split_with_sizes": (lambda x: [p * 2 for p in x.split_with_sizes([1, 3, 2], 1)],
                         lambda dt: (rand(3, 6, dtype=dt),)),
    "scalar_tensor_eye": (lambda x: x * kiln.scalar_tensor(2.5) + kiln.eye(4, 5),
                          lambda dt: (rand(4, 5, dtype=dt),)),
}
NO_GRAD = {"isclose", "count_nonzero", "bce_none"}  # bool/int results, or a target of 0/1 only
TOL = {kiln.float32: (2e-5, 1e-6), kiln.float64: (1e-10, 1e-12), kiln.bfloat16: (3e-2, 3e-2)}


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64], ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_decomposition_compiles_in_one_part(name, dtype):
    fn, make = CASES[name]
    backend = run_compiled(fn, *make(dtype), tol=TOL[dtype])
    assert [len(r.parts) for r in backend.reports] == [1]
    assert [r.eager_nodes for r in backend.reports] == [0]


@pytest.mark.parametrize("name", ["bce", "bce_logits", "huber", "kl_div_batchmean", "glu",
                                  "instance_norm", "prelu_channels"])
def test_reduced_precision(name):
    fn, make = CASES[name]
    backend = run_compiled(fn, *make(kiln.bfloat16), tol=TOL[kiln.bfloat16])
    assert [r.eager_nodes for r in backend.reports] == [0]


@pytest.mark.parametrize("name", ["bce", "bce_logits_weights", "kl_div_batchmean", "huber",
                                  "instance_norm", "glu"])
def test_symbolic_batch(name):
    """Other batch sizes compile once for every size (automatic dynamic), still whole."""
    fn, make = CASES[name]
    first = make(kiln.float32)
    rows = first[0].shape[0]

    def batch(n):  # the arguments with `n` rows where the first has its batch
        return tuple(kiln.cat([a] * 4)[:n] if a.dim() > 1 and a.shape[0] == rows else a
                     for a in first)  # fmt: skip

    backend = run_compiled(fn, *first, calls=[batch(rows + 1), batch(rows * 3)],
                           tol=TOL[kiln.float32])
    assert all(r.eager_nodes == 0 for r in backend.reports)
    assert len(backend.reports) == 2  # the first size, then one graph for every size


@pytest.mark.parametrize("name", sorted(set(CASES) - NO_GRAD))
def test_decomposition_trains_compiled(name):
    fn, make = CASES[name]

    def first_output(*args):
        out = fn(*args)
        return out[0] if isinstance(out, (tuple, list)) else out

    report = grads_match(first_output, list(make(kiln.float64)), compiled_backward=True)
    assert report.backward_parts == 1 and report.eager_nodes == 0, report.fallbacks


def test_non_contiguous_inputs():
    x, t = rand(7, 5).t(), prob(7, 5, seed=1).t()
    backend = run_compiled(lambda x, t: F.binary_cross_entropy_with_logits(x, t)
                           + F.binary_cross_entropy(t, x.sigmoid()), x, t)
    assert [r.eager_nodes for r in backend.reports] == [0]


def test_module_losses_compile():
    losses = [kiln.nn.BCELoss(), kiln.nn.BCEWithLogitsLoss(pos_weight=prob(4) * 2),
              kiln.nn.HuberLoss(delta=0.5), kiln.nn.SmoothL1Loss(), kiln.nn.KLDivLoss("batchmean")]

    def fn(x, t):
        return sum(loss((x.sigmoid() if i == 0 else x), t) for i, loss in enumerate(losses))

    backend = run_compiled(fn, rand(3, 4), prob(3, 4, seed=1))
    assert [r.eager_nodes for r in backend.reports] == [0]


def test_what_a_decomposition_cannot_express_stays_eager_with_the_reason():
    backend = run_compiled(lambda x, r: x.repeat_interleave(r, dim=0) * 2,
                           rand(3, 2), kiln.tensor([1, 0, 2]), strict=False)
    (report,) = backend.reports
    assert report.eager_nodes == 1
    reasons = [why for _, target, why in report.fallbacks if "repeat_interleave" in target]
    assert reasons and "tensor of counts" in reasons[0]


def test_out_of_range_probability_is_nan_compiled():
    """Eager checks the probabilities; compiled code gives NaN for one outside [0, 1], as
    torch.compile does (the documented difference). The capture runs eager, so the first call
    of an out-of-range input raises eager's error."""
    p, t = kiln.tensor([0.5, 1.5]), kiln.tensor([1.0, 0.0])
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(p, t)
    compiled = kiln.compile(lambda p, t: F.binary_cross_entropy(p, t))
    assert compiled(kiln.tensor([0.5, 0.25]), t).item() > 0
    assert compiled(p, t).isnan().item()
