"""Calls compiled as a few graph ops (lowerings_compose.py): conv1d, addmm / addmv / baddbmm,
outer, F.normalize, against eager kiln and PyTorch, with zero eager nodes."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import run_compiled

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

G = np.random.default_rng(0)


def _arr(*shape):
    return G.standard_normal(shape).astype(np.float32)


CASES = {
    "conv1d": (lambda m, F, x, w: F.conv1d(x, w, padding=1) + 1, [(2, 4, 10), (3, 4, 3)]),
    "conv1d_strided": (lambda m, F, x, w, b: F.conv1d(x, w, b, stride=2, dilation=2, groups=2),
                       [(2, 4, 11), (6, 2, 3), (6,)]),
    "addmm": (lambda m, F, c, a, b: m.addmm(c, a, b, beta=0.5, alpha=2), [(5,), (3, 4), (4, 5)]),
    "addmm_beta0": (lambda m, F, c, a, b: m.addmm(c, a, b, beta=0), [(3, 5), (3, 4), (4, 5)]),
    "addmv": (lambda m, F, c, a, b: m.addmv(c, a, b), [(3,), (3, 4), (4,)]),
    "baddbmm": (lambda m, F, c, a, b: m.baddbmm(c, a, b, alpha=0.5),
                [(2, 3, 5), (2, 3, 4), (2, 4, 5)]),
    "outer": (lambda m, F, a, b: m.outer(a, b) * 2, [(3,), (4,)]),
    "normalize": (lambda m, F, a: F.normalize(a, dim=-1), [(3, 4)]),
    "normalize_p1": (lambda m, F, a: F.normalize(a, p=1, dim=0, eps=1e-3), [(3, 4)]),
    "group_norm": (lambda m, F, x: F.group_norm(x, 3), [(2, 6, 5, 5)]),
    "group_norm_affine": (lambda m, F, x, w, b: F.group_norm(x, 2, w, b, eps=1e-3),
                          [(2, 6, 5, 5), (6,), (6,)]),
    "group_norm_3d": (lambda m, F, x, w: F.group_norm(x, 1, w), [(2, 4, 7), (4,)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiles_and_matches(name):
    torch = pytest.importorskip("torch")
    fn, shapes = CASES[name]
    arrays = [_arr(*s) for s in shapes]
    args = [kiln.from_numpy(a) for a in arrays]
    backend = run_compiled(lambda *a: fn(kiln, F, *a), *args, tol=(1e-4, 1e-4))
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    kiln.compiler.reset()
    with kiln.no_grad():
        ours = kiln.compile(lambda *a: fn(kiln, F, *a), backend=CpuBackend(fallback=False))(*args)
    theirs = fn(torch, torch.nn.functional, *(torch.from_numpy(a) for a in arrays))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-4)


def test_beta_zero_ignores_nan_in_the_addend():
    c = kiln.full((3, 5), float("nan"))
    a, b = kiln.from_numpy(_arr(3, 4)), kiln.from_numpy(_arr(4, 5))
    backend = run_compiled(lambda c, a, b: kiln.addmm(c, a, b, beta=0), c, a, b)
    assert backend.reports[0].eager_nodes == 0


def test_conv1d_module_and_padding_by_name():
    m = kiln.nn.Conv1d(4, 5, 3, padding=1).eval()
    backend = run_compiled(m, kiln.from_numpy(_arr(2, 4, 10)), tol=(1e-4, 1e-4))
    assert backend.reports[0].eager_nodes == 0
    w = kiln.from_numpy(_arr(3, 4, 3))
    backend = run_compiled(lambda x: F.conv1d(x, w, padding="same"), kiln.from_numpy(
        _arr(2, 4, 10)), tol=(1e-4, 1e-4))  # fmt: skip
    assert backend.reports[0].eager_nodes == 0


SORTS = {
    "sort": (lambda m, x: tuple(x.sort(-1)), [(3, 7)]),
    "sort_descending_dim0": (lambda m, x: x.sort(dim=0, descending=True).values * 2, [(5, 4)]),
    "argsort": (lambda m, x: x.argsort(-1), [(3, 7)]),
    "topk": (lambda m, x: tuple(x.topk(3)), [(4, 9)]),
    "topk_smallest": (lambda m, x: x.topk(2, dim=0, largest=False).indices, [(4, 9)]),
    "cumsum": (lambda m, x: (x.cumsum(-1) * 2, m.cumsum(x > 0, 0)), [(3, 7)]),
    "cumprod": (lambda m, x: m.cumprod(x, 1, dtype=m.float64), [(3, 7)]),
    "logcumsumexp": (lambda m, x: x.logcumsumexp(0) * 2, [(3, 7)]),
    "cummax": (lambda m, x: tuple(x.cummax(1)), [(3, 7)]),
    "cummin": (lambda m, x: m.cummin(x, 0).values + 1, [(3, 7)]),
    "kthvalue": (lambda m, x: tuple(x.kthvalue(3, 1)), [(3, 7)]),
    "kthvalue_keepdim": (lambda m, x: tuple(m.kthvalue(x, 2, 0, keepdim=True)), [(3, 7)]),
    "median_dim": (lambda m, x: tuple(x.median(1)), [(3, 7)]),
    "median_all": (lambda m, x: x.median() * 2, [(3, 7)]),
    "nanmedian_dim": (lambda m, x: x.nanmedian(0).values, [(3, 7)]),
    "mode": (lambda m, x: x.round().mode(1).values, [(3, 7)]),
    "unfold": (lambda m, x: m.nn.functional.unfold(x.reshape(1, 3, 7, 1).expand(2, 3, 7, 4),
                                                   (3, 2), padding=1, stride=(2, 1)) * 2,
               [(3, 7)]),
    "fold": (lambda m, x: m.nn.functional.fold(x.reshape(1, 3, 7).repeat(2, 4, 1)[:, :, :6],
                                               (3, 4), 2) + 1, [(3, 7)]),
}


@pytest.mark.parametrize("name", sorted(SORTS))
def test_sorts_and_scans_run_inside_the_compiled_part(name):
    torch = pytest.importorskip("torch")
    fn, shapes = SORTS[name]
    arrays = [_arr(*s) for s in shapes]
    args = [kiln.from_numpy(a) for a in arrays]
    backend = run_compiled(lambda *a: fn(kiln, *a), *args)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    with kiln.no_grad():
        ours = kiln.compile(lambda *a: fn(kiln, *a), backend=CpuBackend(fallback=False))(*args)
    theirs = fn(torch, *(torch.from_numpy(a) for a in arrays))
    ours, theirs = (ours, theirs) if isinstance(ours, tuple) else ((ours,), (theirs,))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.double().numpy(), b.double().numpy(), rtol=1e-5, atol=1e-5)


def test_top_p_sampling_filter_is_one_part():
    """A nucleus-sampling filter: softmax, sort, cumsum, a mask and a renormalization, with
    symbolic batch and vocabulary sizes."""
    def top_p(logits):
        probs = logits.softmax(-1)
        sorted_probs, idx = probs.sort(-1, descending=True)
        cum = sorted_probs.cumsum(-1)
        kept = sorted_probs.masked_fill(cum - sorted_probs > 0.9, 0.0)
        return kept / kept.sum(-1, keepdim=True), idx

    x = kiln.from_numpy(_arr(4, 50))
    backend = run_compiled(top_p, x, dynamic=True, calls=[(kiln.from_numpy(_arr(6, 33)),)])
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.eager_calls == 0 and len(report.parts) == 1


def test_topk_of_more_than_the_dim_raises_eagers_error():
    backend = run_compiled(lambda x: x.topk(2).values, kiln.from_numpy(_arr(3, 4)))
    assert backend.reports[0].eager_nodes == 0
    f = kiln.compile(lambda x: x.topk(9).values)
    with kiln.no_grad(), pytest.raises(RuntimeError, match="out of range"):
        f(kiln.from_numpy(_arr(3, 4)))


def test_group_norm_module_with_symbolic_sizes():
    m = kiln.nn.GroupNorm(3, 6).eval()
    backend = run_compiled(m, kiln.from_numpy(_arr(2, 6, 5, 5)), dynamic=True, tol=(1e-4, 1e-4),
                           calls=[(kiln.from_numpy(_arr(3, 6, 4, 7)),)])
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.eager_calls == 0


UPSAMPLES = {
    "nearest_x2": (lambda F, x: F.interpolate(x, scale_factor=2) + 1, (2, 3, 4, 5)),
    "nearest_size": (lambda F, x: F.interpolate(x, size=(7, 9)) * 2, (2, 3, 4, 5)),
    "nearest_exact": (lambda F, x: F.interpolate(x, size=(7, 9), mode="nearest-exact"),
                      (2, 3, 4, 5)),
    "bilinear": (lambda F, x: F.interpolate(x, size=(7, 9), mode="bilinear") + 1, (2, 3, 4, 5)),
    "bilinear_corners": (lambda F, x: F.interpolate(x, scale_factor=2, mode="bilinear",
                                                    align_corners=True), (2, 3, 4, 5)),
    "linear_1d": (lambda F, x: F.interpolate(x, scale_factor=1.5, mode="linear"), (2, 3, 4)),
    "trilinear": (lambda F, x: F.interpolate(x, scale_factor=2, mode="trilinear"),
                  (1, 2, 3, 4, 5)),
}


@pytest.mark.parametrize("name", sorted(UPSAMPLES))
def test_interpolate_is_one_part(name):
    torch = pytest.importorskip("torch")
    fn, shape = UPSAMPLES[name]
    a = _arr(*shape)
    backend = run_compiled(lambda x: fn(F, x), kiln.from_numpy(a))
    (report,) = backend.reports
    assert report.eager_nodes == 0 and len(report.parts) == 1
    with kiln.no_grad():
        ours = kiln.compile(lambda x: fn(F, x))(kiln.from_numpy(a))
    np.testing.assert_allclose(ours.numpy(), fn(torch.nn.functional, torch.from_numpy(a)).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_interpolate_forms_that_stay_eager_say_why():
    x = kiln.from_numpy(_arr(2, 3, 4, 5))
    for fn, kw, why in [
        (lambda x: F.interpolate(x, scale_factor=1.3), {}, "not exactly output / input"),
        (lambda x: F.interpolate(x, scale_factor=1.5), {"dynamic": True}, "fractional"),
        (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), {"dynamic": True},
         "bicubic interpolate of symbolic"),
    ]:
        backend = run_compiled(fn, x, strict=False, **kw)
        assert why in str(backend.reports[0].fallbacks)
    m = kiln.nn.Upsample(scale_factor=2, mode="nearest")
    backend = run_compiled(m, x)
    assert backend.reports[0].eager_nodes == 0


def test_interpolate_of_symbolic_spatial_sizes():
    """Whole scale factors and constant sizes of a dynamic input compile once for every size."""
    cases = [
        lambda x: F.interpolate(x, scale_factor=2) * 2,
        lambda x: F.interpolate(x, scale_factor=(3, 2), mode="bilinear"),
        lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=True),
        lambda x: F.interpolate(x, size=(4, 6), mode="nearest-exact") + 1,
    ]
    for fn in cases:
        backend = run_compiled(fn, kiln.from_numpy(_arr(2, 3, 4, 5)), dynamic=True,
                               calls=[(kiln.from_numpy(_arr(3, 3, 7, 3)),),
                                      (kiln.from_numpy(_arr(4, 3, 5, 9)),)])
        assert all(r.eager_nodes == 0 for r in backend.reports)
        assert len(backend.reports) == 1  # one compile for every size
