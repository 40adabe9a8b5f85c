"""Normalization ops (layer/rms/group/batch/instance norm, F.normalize) against torch."""

import math

import pytest
import torch
import torch.nn.functional as TF
from conftest import FLOAT_DTYPES, assert_close, make, to_kiln

import kiln
import kiln.nn.functional as F

# Normalized values are O(1); reduced floats may differ from torch by one rounding of the output.
NORM_TOL = {"float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2), "float32": (1e-5, 1e-4)}


def check(k, t, dtype):
    atol, rtol = NORM_TOL.get(dtype, (None, None))
    assert_close(k, t, atol=atol, rtol=rtol)


def transposed(shape, dtype, seed=0):
    """A non-contiguous (last two dims transposed) input of `shape`, as (torch, kiln)."""
    swapped = tuple(shape[:-2]) + (shape[-1], shape[-2])
    t, k = make(swapped, dtype, seed=seed)
    return t.transpose(-1, -2), k.transpose(-1, -2)


def param(shape, dtype, seed):
    t, k = make(shape, dtype, seed=seed, low=0.5, high=1.5)
    return t, k


# ---- layer_norm --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,norm", [((4, 7), (7,)), ((2, 3, 5), (3, 5)), ((6,), (6,))])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm_matches_torch(dtype, shape, norm, affine):
    tx, kx = make(shape, dtype)
    tw, kw = param(norm, dtype, 1) if affine != "none" else (None, None)
    tb, kb = make(norm, dtype, seed=2) if affine == "both" else (None, None)
    check(
        F.layer_norm(kx, norm, kw, kb, eps=1e-5), TF.layer_norm(tx, norm, tw, tb, eps=1e-5), dtype
    )
    check(kiln.layer_norm(kx, list(norm), kw, kb), torch.layer_norm(tx, list(norm), tw, tb), dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_reduced_input_with_float32_params(dtype):
    tx, kx = make((3, 8), dtype)
    tw, kw = param((8,), "float32", 1)
    tb, kb = make((8,), "float32", seed=2)
    check(F.layer_norm(kx, (8,), kw, kb), TF.layer_norm(tx, (8,), tw, tb), dtype)


def test_layer_norm_non_contiguous_and_int_shape():
    tx, kx = transposed((3, 4, 6), "float32")
    assert not kx.is_contiguous()
    check(F.layer_norm(kx, (6,)), TF.layer_norm(tx, (6,)), "float32")
    with pytest.raises(TypeError) as theirs:
        TF.layer_norm(tx, 6)
    with pytest.raises(TypeError) as ours:
        F.layer_norm(kx, 6)
    assert str(ours.value) == str(theirs.value)  # torch's words: an int is no shape


@pytest.mark.parametrize("shape,norm", [((0, 4), (4,)), ((3, 0), (0,)), ((2, 0, 3), (3,))])
def test_layer_norm_zero_size(shape, norm):
    tx, kx = make(shape, "float32")
    check(F.layer_norm(kx, norm), TF.layer_norm(tx, norm), "float32")


def test_layer_norm_long_rows_large_mean_are_accurate():
    # 70000-element rows far from zero: exact statistics of the float32 input (computed in
    # float64 by torch) are matched to ~1e-5, where float32 accumulation drifts to ~1e-4.
    tx, kx = make((3, 70000), "float64", low=999.0, high=1001.0)
    want = TF.layer_norm(tx.float().double(), (70000,)).float()
    assert_close(F.layer_norm(kx.float(), (70000,)), want, atol=2e-5, rtol=0)


def test_layer_norm_errors():
    _, kx = make((2, 3, 4), "float32")
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[3\].*\[\*, 3\].*\[2, 3, 4\]"):
        F.layer_norm(kx, (3,))
    with pytest.raises(RuntimeError, match="at least 1-dimensional"):
        F.layer_norm(kx, ())
    with pytest.raises(RuntimeError, match=r"weight of shape \[3\].*normalized_shape = \[4\]"):
        F.layer_norm(kx, (4,), make((3,), "float32")[1])
    with pytest.raises(RuntimeError, match="mixed dtype.*weight.*float64"):
        F.layer_norm(kx, (4,), make((4,), "float64")[1])
    with pytest.raises(NotImplementedError, match="layer_norm.*int64"):
        F.layer_norm(make((2, 4), "int64")[1], (4,))


# ---- rms_norm ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("eps", [None, 1e-3])
@pytest.mark.parametrize("with_weight", [False, True])
def test_rms_norm_matches_torch(dtype, eps, with_weight):
    tx, kx = make((3, 2, 10), dtype)
    tw, kw = param((2, 10), dtype, 1) if with_weight else (None, None)
    check(F.rms_norm(kx, (2, 10), kw, eps), TF.rms_norm(tx, (2, 10), tw, eps), dtype)


def test_rms_norm_tiny_inputs_use_dtype_epsilon():
    # mean(x^2) far below eps: the default eps (finfo.eps) decides the scale.
    tx = torch.full((2, 4), 1e-5, dtype=torch.float32)
    check(F.rms_norm(to_kiln(tx), (4,)), TF.rms_norm(tx, (4,)), "float32")
    tx = tx.double() * 1e-5
    check(F.rms_norm(to_kiln(tx), (4,)), TF.rms_norm(tx, (4,)), "float64")


def test_rms_norm_non_contiguous_zero_size_and_top_level():
    tx, kx = transposed((2, 5, 3), "float32")
    tw, kw = param((3,), "float32", 1)
    check(kiln.rms_norm(kx, [3], kw), torch.rms_norm(tx, [3], tw), "float32")
    tz, kz = make((0, 3), "float32")
    check(F.rms_norm(kz, (3,)), TF.rms_norm(tz, (3,)), "float32")


def test_rms_norm_errors():
    _, kx = make((2, 3, 4), "float32")
    with pytest.raises(RuntimeError, match=r"rms_norm.*normalized_shape=\[3\]"):
        F.rms_norm(kx, (3,))
    with pytest.raises(NotImplementedError, match="rms_norm.*int32"):
        F.rms_norm(make((2, 4), "int32")[1], (4,))
    with pytest.raises(RuntimeError, match=r"weight of shape \[5\]"):
        F.rms_norm(kx, (4,), make((5,), "float32")[1])


# ---- group_norm --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize(
    "shape,groups", [((2, 6, 5), 3), ((3, 4), 2), ((2, 6, 3, 3), 1), ((2, 6, 3, 3), 6)]
)
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm_matches_torch(dtype, shape, groups, affine):
    tx, kx = make(shape, dtype)
    c = shape[1]
    tw, kw = param((c,), dtype, 1) if affine else (None, None)
    tb, kb = make((c,), dtype, seed=2) if affine else (None, None)
    check(F.group_norm(kx, groups, kw, kb), TF.group_norm(tx, groups, tw, tb), dtype)


def test_group_norm_non_contiguous_eps_and_top_level():
    tx, kx = transposed((2, 4, 5, 3), "float64")
    check(F.group_norm(kx, 2, eps=0.1), TF.group_norm(tx, 2, eps=0.1), "float64")
    check(kiln.group_norm(kx, 4), torch.group_norm(tx, 4), "float64")
    tz, kz = make((0, 4, 3), "float32")
    check(F.group_norm(kz, 2), TF.group_norm(tz, 2), "float32")


def test_group_norm_errors():
    _, kx = make((2, 3, 4), "float32")
    with pytest.raises(RuntimeError, match=r"divisible by num_groups.*\[2, 3, 4\].*num_groups=2"):
        F.group_norm(kx, 2)
    with pytest.raises(RuntimeError, match=r"weight of shape \[2\].*\[2, 3, 4\]"):
        F.group_norm(kx, 3, make((2,), "float32")[1])
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        F.group_norm(make((3,), "float32")[1], 1)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.group_norm(make((1, 2), "float32")[1], 2)
    with pytest.raises(ValueError, match="num_groups must be positive"):
        kiln.group_norm(kx, 0)
    with pytest.raises(NotImplementedError, match="group_norm.*int64"):
        F.group_norm(make((2, 4), "int64")[1], 2)


# ---- batch_norm --------------------------------------------------------------------------------


def running(c, dtype):
    tm, km = make((c,), dtype, seed=5, low=-0.5, high=0.5)
    tv, kv = make((c,), dtype, seed=6, low=0.5, high=2.0)
    return tm, km, tv, kv


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6), (2, 3, 4, 5)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_matches_torch_and_updates_running_stats(dtype, shape, training):
    tx, kx = make(shape, dtype)
    stat_dtype = "float32" if dtype in ("float16", "bfloat16") else dtype
    tm, km, tv, kv = running(3, stat_dtype)
    tw, kw = param((3,), stat_dtype, 1)
    tb, kb = make((3,), stat_dtype, seed=2)
    want = TF.batch_norm(tx, tm, tv, tw, tb, training=training, momentum=0.3, eps=1e-4)
    got = F.batch_norm(kx, km, kv, kw, kb, training=training, momentum=0.3, eps=1e-4)
    check(got, want, dtype)
    check(km, tm, stat_dtype)
    check(kv, tv, stat_dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_batch_norm_reduced_running_stats_of_input_dtype(dtype):
    tx, kx = make((6, 4), dtype)
    tm, km, tv, kv = running(4, dtype)
    check(F.batch_norm(kx, km, kv, training=True), TF.batch_norm(tx, tm, tv, training=True), dtype)
    check(km, tm, dtype)
    check(kv, tv, dtype)


def test_batch_norm_training_without_running_stats_and_non_contiguous():
    tx, kx = transposed((4, 3, 5), "float32")
    tx, kx = tx.transpose(0, 1), kx.transpose(0, 1)  # (3, 4, 5) with channels 4, strided
    check(
        F.batch_norm(kx, None, None, training=True),
        TF.batch_norm(tx, None, None, training=True),
        "float32",
    )


def test_batch_norm_running_stats_views_are_written_in_place():
    tx, kx = make((8, 3), "float64")
    tbuf, kbuf = make((2, 3), "float64", low=0.5, high=1.5)
    km, kv = kbuf.select(0, 0), kbuf.select(0, 1)
    version = km._version
    TF.batch_norm(tx, tbuf[0], tbuf[1], training=True)
    F.batch_norm(kx, km, kv, training=True)
    assert km._version > version
    check(kbuf, tbuf, "float64")


def test_batch_norm_top_level_signature_and_zero_size():
    tx, kx = make((5, 3, 2), "float32")
    tm, km, tv, kv = running(3, "float32")
    want = torch.batch_norm(tx, None, None, tm, tv, True, 0.1, 1e-5, False)
    check(kiln.batch_norm(kx, None, None, km, kv, True, 0.1, 1e-5, False), want, "float32")
    check(km, tm, "float32")
    tz, kz = make((0, 3), "float32")
    tm, km, tv, kv = running(3, "float32")
    check(
        F.batch_norm(kz, km, kv, training=True), TF.batch_norm(tz, tm, tv, training=True), "float32"
    )
    check(km, tm, "float32")


def test_batch_norm_errors():
    _, kx = make((4, 3), "float32")
    _, km, _, kv = running(3, "float32")
    with pytest.raises(RuntimeError, match="must be defined in evaluation mode"):
        F.batch_norm(kx, None, None)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(make((1, 3), "float32")[1], km, kv, training=True)
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 2"):
        F.batch_norm(kx, make((2,), "float32")[1], kv)
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 4"):
        F.batch_norm(kx, km, kv, make((4,), "float32")[1])
    with pytest.raises(ValueError, match="both be None or neither"):
        F.batch_norm(kx, km, None, training=True)
    with pytest.raises(RuntimeError, match="mixed dtype.*running_mean.*float64"):
        F.batch_norm(kx, make((3,), "float64")[1], kv)
    with pytest.raises(NotImplementedError, match="batch_norm.*int64"):
        F.batch_norm(make((4, 3), "int64")[1], None, None, training=True)
    with pytest.raises(RuntimeError, match=r"at least 2 dimensions.*\[5\]"):
        F.batch_norm(make((5,), "float32")[1], km, kv)


# ---- instance_norm -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 4)])
@pytest.mark.parametrize("stats", [False, True])
def test_instance_norm_matches_torch(dtype, shape, stats):
    tx, kx = make(shape, dtype)
    stat_dtype = "float32" if dtype == "bfloat16" else dtype
    tm, km, tv, kv = running(3, stat_dtype) if stats else (None,) * 4
    tw, kw = param((3,), stat_dtype, 1)
    tb, kb = make((3,), stat_dtype, seed=2)
    want = TF.instance_norm(tx, tm, tv, tw, tb, momentum=0.2)
    check(F.instance_norm(kx, km, kv, kw, kb, momentum=0.2), want, dtype)
    if stats:
        check(km, tm, stat_dtype)
        check(kv, tv, stat_dtype)


def test_instance_norm_eval_mode_and_errors():
    tx, kx = make((2, 3, 6), "float32")
    tm, km, tv, kv = running(3, "float32")
    want = TF.instance_norm(tx, tm, tv, use_input_stats=False)
    check(F.instance_norm(kx, km, kv, use_input_stats=False), want, "float32")
    with pytest.raises(RuntimeError, match="defined when use_input_stats is false"):
        F.instance_norm(kx, use_input_stats=False)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(make((2, 3, 1), "float32")[1])


# ---- normalize ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, math.inf, -math.inf, 0.0])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_normalize_matches_torch(dtype, p, dim):
    tx, kx = make((3, 4, 5), dtype)
    check(F.normalize(kx, p=p, dim=dim), TF.normalize(tx, p=p, dim=dim), dtype)


def test_normalize_zero_vectors_non_contiguous_0d_and_empty():
    tx = torch.zeros(3, 4)
    tx[1] = torch.arange(4.0)
    check(F.normalize(to_kiln(tx)), TF.normalize(tx), "float32")
    tx, kx = transposed((2, 5, 3), "float64")
    check(F.normalize(kx, dim=-1, eps=0.5), TF.normalize(tx, dim=-1, eps=0.5), "float64")
    t0, k0 = make((), "float32")
    check(F.normalize(k0, dim=0), TF.normalize(t0, dim=0), "float32")
    te, ke = make((3, 0), "float32")
    check(F.normalize(ke), TF.normalize(te), "float32")
    out = kx.clone()
    res = F.normalize(kx, dim=-1, out=out)
    assert res is out
    check(out, TF.normalize(tx, dim=-1), "float64")


def test_normalize_errors():
    with pytest.raises(RuntimeError, match="normalize.*floating point.*int64"):
        F.normalize(make((2, 3), "int64")[1])
    with pytest.raises(IndexError, match="normalize.*out of range"):
        F.normalize(make((2, 3), "float32")[1], dim=2)
