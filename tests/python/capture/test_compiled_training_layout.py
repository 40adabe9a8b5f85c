"""Compiled gradients of the statistics, layout and transposed-convolution ops against eager
autograd (float64): var/std, prod, logcumsumexp, cumprod, stack, every pad mode, interpolation
(nearest, nearest-exact, linear, bilinear, trilinear; up and down, integer and fractional
ratios), fold/unfold, advanced indexing with negative and repeated indices, conv_transpose1d/2d
and inference batch_norm. Each trains in one compiled part with no eager node."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand
from test_compiled_training_ops import grads_match

import kiln
import kiln.nn.functional as F


def _compiled(fn, *inputs):
    report = grads_match(fn, list(inputs), compiled_backward=True)
    assert report.backward_parts == 1 and report.eager_nodes == 0, report.fallbacks


def x64(*shape, seed=0):
    return rand(*shape, dtype=kiln.float64, seed=seed)


STATS = {
    "var_dim": lambda x: x.var(0),
    "var_all": lambda x: x.var(),
    "var_keepdim_pop": lambda x: x.var((0, 2), keepdim=True, correction=0),
    "std_dim": lambda x: x.std(-1),
    "std_keepdim": lambda x: kiln.std(x, 1, keepdim=True, correction=2),
    "prod_all": lambda x: x.prod(),
    "prod_dim": lambda x: x.prod(1),
    "prod_keepdim": lambda x: x.prod(-1, keepdim=True),
    # exact zeros, once and twice in a row: the rule divides by nothing
    "prod_zeros": lambda x: (x * (x.abs() > 0.6)).prod(2),
    "logcumsumexp": lambda x: x.logcumsumexp(1),
    "cumprod": lambda x: x.cumprod(-1),
    "cumprod_zeros": lambda x: kiln.cumprod(x * (x.abs() > 0.6), 1),  # the extern's exact scan
    "logcumsumexp_last": lambda x: kiln.logcumsumexp(x * 3, -1),
}


@pytest.mark.parametrize("name", sorted(STATS))
def test_statistics_and_scans(name):
    _compiled(STATS[name], x64(3, 5, 4))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack(dim):
    _compiled(lambda a, b: kiln.stack([a, b * 2, a * b], dim).tanh(), x64(3, 4), x64(3, 4, seed=1))


PADS = [
    ((1, 2), "constant"), ((2, 0, 1, 3), "constant"), ((1, -2, 0, 1), "constant"),
    ((2, 1), "reflect"), ((1, 2, 2, 1), "reflect"), ((3, 1), "replicate"),
    ((1, 2, 0, 2), "replicate"), ((2, 1), "circular"), ((1, 3, 2, 0), "circular"),
]  # fmt: skip


@pytest.mark.parametrize("pad,mode", PADS, ids=[f"{m}{len(p)}_{i}" for i, (p, m) in
                                                 enumerate(PADS)])
def test_pad(pad, mode):
    # torch's non-constant modes pad the last dim of a 3-d input, the last two of a 4-d one
    lead = (2, 3) if mode == "constant" or len(pad) == 4 else (3,)
    weights = x64(*lead, *_padded((4, 5), pad), seed=3)
    _compiled(lambda x: F.pad(x, pad, mode=mode) * weights, x64(*lead, 4, 5))


def _padded(sizes, pad):
    out = list(sizes)
    for i in range(0, len(pad), 2):
        out[-1 - i // 2] += pad[i] + pad[i + 1]
    return out


INTERPOLATIONS = {
    "nearest_x2": ((1, 2, 4, 5), dict(scale_factor=2)),
    "nearest_fraction": ((2, 2, 5, 3), dict(size=(7, 8))),
    "nearest_down": ((1, 3, 8, 6), dict(size=(3, 4))),
    "nearest_exact": ((1, 2, 5, 4), dict(size=(7, 9), mode="nearest-exact")),
    "bilinear": ((2, 2, 4, 5), dict(size=(7, 9), mode="bilinear")),
    "bilinear_corners": ((1, 3, 4, 3), dict(scale_factor=2, mode="bilinear",
                                            align_corners=True)),
    "bilinear_down": ((1, 2, 9, 7), dict(size=(4, 3), mode="bilinear")),
    "linear": ((2, 3, 6), dict(size=11, mode="linear")),
    "trilinear": ((1, 2, 3, 4, 2), dict(size=(5, 6, 3), mode="trilinear")),
    "nearest_1d": ((2, 2, 5), dict(scale_factor=3)),
}


@pytest.mark.parametrize("name", sorted(INTERPOLATIONS))
def test_interpolate(name):
    shape, kwargs = INTERPOLATIONS[name]
    _compiled(lambda x: F.interpolate(x, **kwargs).sin(), x64(*shape))


def test_unfold_and_fold():
    _compiled(lambda x: F.unfold(x, (2, 3), padding=1, stride=(1, 2), dilation=(2, 1)).cos(),
              x64(2, 3, 6, 7))
    _compiled(lambda c: F.fold(c, (5, 6), (2, 2), stride=1).sin(), x64(2, 12, 20))
    _compiled(lambda c: F.fold(c, (6, 6), 3, stride=2, padding=1).sin(), x64(1, 18, 9))


def test_advanced_indexing():
    def pick(x):
        rows = (x[:, 0].abs() * 7).long() % 5 - 2  # negative, repeated entries
        return x[rows] * 2 + x[:, rows[:3]].sum(1, keepdim=True)

    _compiled(pick, x64(4, 6))


CONV_TRANSPOSE = {
    "plain": dict(),
    "stride_padding": dict(stride=2, padding=1),
    "output_padding": dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2)),
    "dilation": dict(dilation=2, padding=1),
    "groups": dict(groups=2, stride=2),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", sorted(CONV_TRANSPOSE))
def test_conv_transpose2d(name, bias):
    kwargs = CONV_TRANSPOSE[name]
    args = [x64(2, 4, 5, 4), x64(4, 3, 3, 2, seed=1)] + ([x64(3 * kwargs.get("groups", 1),
                                                               seed=2)] if bias else [])
    _compiled(lambda x, w, *b: F.conv_transpose2d(x, w, *b, **kwargs).tanh(), *args)


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=3, padding=2, output_padding=1),
                                    dict(groups=2, dilation=2)], ids=["plain", "strided",
                                                                      "groups"])
def test_conv_transpose1d(kwargs):
    _compiled(lambda x, w, b: F.conv_transpose1d(x, w, b, **kwargs).tanh(), x64(2, 4, 7),
              x64(4, 2, 3, seed=1), x64(2 * kwargs.get("groups", 1), seed=2))


def test_conv_transpose_with_output_padding_past_the_stride_trains_eagerly():
    """output_padding >= stride (allowed below the dilation): the adjoint convolution would give
    the input gradient extra rows, so this part trains on eager kernels, with eager's grads."""
    report = grads_match(lambda x, w: F.conv_transpose2d(x, w, stride=1, dilation=2,
                                                         output_padding=1).tanh(),
                         [x64(1, 2, 4, 4), x64(2, 3, 2, 2, seed=1)], compiled_backward=False)
    assert report.backward_parts == 0
    assert any("output_padding" in reason for _, _, reason in report.fallbacks)


def test_conv_transpose_module_in_a_decoder():
    kiln.manual_seed(0)
    up = kiln.nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1).double()
    conv = kiln.nn.Conv2d(2, 3, 3, padding=1).double()
    _compiled(lambda x: conv(up(x).relu()), x64(2, 4, 5, 6))


def test_batch_norm_in_eval_mode():
    kiln.manual_seed(0)
    bn = kiln.nn.BatchNorm2d(3).double()
    bn.running_mean.copy_(x64(3, seed=4))
    bn.running_var.copy_(x64(3, seed=5).abs() + 0.5)
    bn.weight.data.copy_(x64(3, seed=6))
    bn.eval()
    _compiled(lambda x: bn(x).sin(), x64(2, 3, 4, 5))
    assert bn.weight.grad is not None and bn.bias.grad is not None
    # the functional form with the statistics and affine parameters as operands
    _compiled(lambda x, w, b: F.batch_norm(x, bn.running_mean, bn.running_var, w, b, False,
                                           eps=1e-3).cos(), x64(4, 3), x64(3, seed=1),
              x64(3, seed=2))


def test_floor_divide_carries_no_gradient_compiled_or_eager():
    def fn(x):
        return (x // 0.5) * x

    _compiled(fn, x64(3, 4))
