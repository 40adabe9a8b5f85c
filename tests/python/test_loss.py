"""Loss functions of kiln.nn.functional against torch.nn.functional."""

import warnings

import pytest
import torch
import torch.nn.functional as TF
from conftest import FLOAT_DTYPES, assert_close, make, to_kiln

import kiln
import kiln.nn.functional as F

REDUCTIONS = ["none", "mean", "sum"]
# Reduced floats: torch rounds intermediate tensors (log_softmax, per-element losses) to the
# dtype, kiln rounds once; a couple of ulps apart.
LOSS_TOL = {"float16": (5e-3, 5e-3), "bfloat16": (3e-2, 3e-2), "float32": (1e-5, 1e-5)}


def check(k, t, atol=None, rtol=None):
    name = str(t.dtype).replace("torch.", "")
    a, r = LOSS_TOL.get(name, (None, None))
    assert_close(k, t, atol=a if atol is None else atol, rtol=r if rtol is None else rtol)


def targets(shape, classes, seed=0, ignore=None):
    """Class indices (torch, kiln); every third one set to `ignore` when given."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, classes, shape, generator=g)
    if ignore is not None:
        t.view(-1)[::3] = ignore
    return t, to_kiln(t)


def both(fn_name, t_args, k_args, **kwargs):
    """Calls F.<fn_name> of torch and kiln with warnings (size mismatch, 'mean') silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(TF, fn_name)(*t_args, **kwargs)
        got = getattr(F, fn_name)(*k_args, **kwargs)
    return got, want


# ---- cross_entropy / nll_loss ------------------------------------------------------------------

CLASS_SHAPES = [((5, 4), (5,)), ((4,), ()), ((2, 4, 3), (2, 3)), ((2, 3, 2, 3), (2, 2, 3))]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shapes", CLASS_SHAPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_indices(dtype, shapes, reduction, weighted):
    in_shape, t_shape = shapes
    c = in_shape[0] if len(in_shape) == 1 else in_shape[1]
    tx, kx = make(in_shape, dtype)
    tt, kt = targets(t_shape, c, ignore=-100 if t_shape else None)
    tw, kw = make((c,), dtype, seed=3, low=0.1, high=2.0) if weighted else (None, None)
    for smoothing in (0.0, 0.2):
        got, want = both(
            "cross_entropy",
            (tx, tt, tw),
            (kx, kt, kw),
            reduction=reduction,
            label_smoothing=smoothing,
        )
        check(got, want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shapes", CLASS_SHAPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_matches_torch(dtype, shapes, reduction):
    in_shape, t_shape = shapes
    c = in_shape[0] if len(in_shape) == 1 else in_shape[1]
    tx, kx = make(in_shape, dtype, low=-4.0, high=0.0)
    tt, kt = targets(t_shape, c, seed=1)
    tw, kw = make((c,), dtype, seed=3, low=0.1, high=2.0)
    got, want = both("nll_loss", (tx, tt, tw), (kx, kt, kw), reduction=reduction, ignore_index=1)
    check(got, want)
    got, want = both("nll_loss", (tx, tt), (kx, kt), reduction=reduction)
    check(got, want)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("target_dtype", ["float32", "float64", "float16"])
def test_cross_entropy_probability_targets(reduction, target_dtype):
    tx, kx = make((6, 5), "float32")
    tt = torch.softmax(make((6, 5), "float64", seed=4)[0], dim=1).to(getattr(torch, target_dtype))
    kt = to_kiln(tt)
    tw, kw = make((5,), "float32", seed=3, low=0.1, high=2.0)
    for smoothing in (0.0, 0.3):
        for w in ((None, None), (tw, kw)):
            got, want = both(
                "cross_entropy",
                (tx, tt, w[0]),
                (kx, kt, w[1]),
                reduction=reduction,
                label_smoothing=smoothing,
            )
            # log_softmax runs at the input's (float32) precision whatever the target's dtype.
            check(got, want, atol=1e-6, rtol=1e-6)


def test_cross_entropy_probability_targets_k_dim_and_unbatched():
    tx, kx = make((2, 3, 4), "float64")
    tt = torch.softmax(make((2, 3, 4), "float64", seed=1)[0], dim=1)
    check(*both("cross_entropy", (tx, tt), (kx, to_kiln(tt)), reduction="none"))
    check(
        *both(
            "cross_entropy",
            (tx[0, :, 0], tt[0, :, 0]),
            (kx.select(0, 0).select(1, 0), to_kiln(tt[0, :, 0])),
        )
    )


def test_cross_entropy_non_contiguous_uint8_targets_and_large_logits():
    tx, kx = make((7, 5), "float32")
    tx, kx = tx.t(), kx.t()  # (5, 7): strided, 7 classes
    tt, kt = targets((5,), 7, seed=2)
    check(*both("cross_entropy", (tx, tt.to(torch.uint8)), (kx, kt.byte())))
    big = tx * 1000  # the max-shift keeps log_softmax finite
    check(*both("cross_entropy", (big, tt), (to_kiln(big), kt), reduction="none"))


def test_cross_entropy_ignored_and_empty_give_nan_like_torch():
    tx, kx = make((4, 3), "float32")
    tt = torch.full((4,), -100)
    for smoothing in (0.0, 0.1):
        check(*both("cross_entropy", (tx, tt), (kx, to_kiln(tt)), label_smoothing=smoothing))
    check(*both("cross_entropy", (tx, tt), (kx, to_kiln(tt)), reduction="sum"))
    te, ke = make((0, 3), "float32")
    ti = torch.zeros(0, dtype=torch.long)
    check(*both("cross_entropy", (te, ti), (ke, to_kiln(ti))))
    check(*both("nll_loss", (te, ti), (ke, to_kiln(ti)), reduction="none"))


def test_legacy_size_average_and_reduce_flags():
    tx, kx = make((4, 3), "float32")
    tt, kt = targets((4,), 3)
    for sa, red in ((False, None), (None, False), (True, True)):
        check(*both("cross_entropy", (tx, tt), (kx, kt), size_average=sa, reduce=red))


def test_class_loss_errors():
    _, kx = make((4, 3), "float32")
    kt = to_kiln(torch.tensor([0, 2, 1, 2]))
    with pytest.raises(IndexError, match=r"target 5 is out of bounds.*\[0, 3\)"):
        F.cross_entropy(kx, to_kiln(torch.tensor([0, 5, 1, 2])))
    with pytest.raises(IndexError, match="target -1 is out of bounds"):
        F.nll_loss(kx, to_kiln(torch.tensor([0, -1, 1, 2])))
    with pytest.raises(ValueError, match=r"batch_size \(4\) to match target batch_size \(3\)"):
        F.cross_entropy(kx, to_kiln(torch.tensor([0, 1, 2])))
    with pytest.raises(
        RuntimeError, match=r"target of shape \[2, 4\].*got target of shape \[2, 5\]"
    ):
        F.nll_loss(make((2, 3, 4), "float32")[1], to_kiln(torch.zeros(2, 5, dtype=torch.long)))
    with pytest.raises(RuntimeError, match="int64 or uint8.*int32"):
        F.cross_entropy(kx, kt.int())
    with pytest.raises(RuntimeError, match=r"all 3 classes.*\[2\]"):
        F.cross_entropy(kx, kt, weight=make((2,), "float32")[1])
    with pytest.raises(RuntimeError, match="weight of the input's dtype float32.*float64"):
        F.nll_loss(kx, kt, weight=make((3,), "float64")[1])
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0"):
        F.cross_entropy(kx, kt, label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"1 or more dimensions \(got 0\)"):
        F.cross_entropy(make((), "float32")[1], to_kiln(torch.tensor(0)))
    with pytest.raises(RuntimeError, match="ignore_index is not supported"):
        F.cross_entropy(kx, kx, ignore_index=1)
    with pytest.raises(RuntimeError, match="class probabilities, got int64"):
        F.cross_entropy(kx, make((4, 3), "int64")[1])
    with pytest.raises(ValueError, match="bogus is not a valid value for reduction"):
        F.cross_entropy(kx, kt, reduction="bogus")
    with pytest.raises(NotImplementedError, match="cross_entropy.*int64"):
        F.cross_entropy(make((4, 3), "int64")[1], kt)
    with pytest.raises(ValueError, match="for 1D input"):
        F.cross_entropy(make((3,), "float32")[1], kt)


# ---- regression losses -------------------------------------------------------------------------

POINTWISE = [
    ("mse_loss", {}),
    ("l1_loss", {}),
    ("smooth_l1_loss", {"beta": 0.5}),
    ("smooth_l1_loss", {"beta": 0.0}),
    ("huber_loss", {"delta": 0.7}),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fn,kwargs", POINTWISE)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pointwise_losses_match_torch(dtype, fn, kwargs, reduction):
    tx, kx = make((4, 5), dtype)
    ty, ky = make((4, 5), dtype, seed=1)
    check(*both(fn, (tx, ty), (kx, ky), reduction=reduction, **kwargs))


@pytest.mark.parametrize("fn,kwargs", POINTWISE)
def test_pointwise_losses_broadcast_promote_and_strides(fn, kwargs):
    tx, kx = make((3, 4), "float32")
    ty, ky = make((4,), "float64", seed=1)
    check(*both(fn, (tx, ty), (kx, ky), reduction="none", **kwargs))
    check(*both(fn, (tx.t(), ty[:3]), (kx.t(), ky.narrow(0, 0, 3)), **kwargs))
    te, ke = make((0, 4), "float32")
    check(*both(fn, (te, te), (ke, ke), **kwargs))
    check(*both(fn, (te, te), (ke, ke), reduction="sum", **kwargs))
    t0, k0 = make((), "float32")
    check(*both(fn, (t0, tx), (k0, kx), reduction="none", **kwargs))


@pytest.mark.parametrize("fn", ["mse_loss", "l1_loss", "huber_loss"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weight_dtype", ["float32", "float64"])
def test_weighted_pointwise_losses(fn, reduction, weight_dtype):
    tx, kx = make((3, 4), "float32")
    ty, ky = make((3, 4), "float32", seed=1)
    tw, kw = make((3, 4), weight_dtype, seed=2, low=0.0, high=2.0)
    got = getattr(F, fn)(kx, ky, reduction=reduction, weight=kw)
    want = getattr(TF, fn)(tx, ty, reduction=reduction, weight=tw)
    check(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_l1_loss_on_integers(dtype, reduction):
    tx, kx = make((3, 4), dtype)
    ty, ky = make((3, 4), dtype, seed=1)
    check(*both("l1_loss", (tx, ty), (kx, ky), reduction=reduction))
    check(*both("l1_loss", (tx, ty.float()), (kx, ky.float()), reduction=reduction))


def test_pointwise_loss_errors():
    _, kx = make((3, 4), "float32")
    _, ki = make((3, 4), "int64")
    with pytest.raises(NotImplementedError, match="mse_loss.*int64"):
        F.mse_loss(ki, ki)
    with pytest.raises(RuntimeError, match="l1_loss.*mean.*int64"):
        F.l1_loss(ki, ki)
    with pytest.raises(TypeError, match="bool"):
        F.l1_loss(ki.bool(), ki.bool(), reduction="sum")
    with pytest.warns(UserWarning, match="different to the input size"):
        with pytest.raises(RuntimeError, match=r"shapes \[3, 4\] and \[2, 4\] cannot be broadcast"):
            F.mse_loss(kx, make((2, 4), "float32")[1])
    with pytest.raises(ValueError, match=r"same size.*weight of shape \[4\]"):
        F.mse_loss(kx, kx, weight=make((4,), "float32")[1])
    with pytest.raises(RuntimeError, match="negative values for beta"):
        F.smooth_l1_loss(kx, kx, beta=-1.0)
    with pytest.raises(RuntimeError, match="non-positive values for delta"):
        F.huber_loss(kx, kx, delta=0.0)
    with pytest.raises(RuntimeError, match="float32 can't be cast.*int64"):
        F.huber_loss(ki, kx)
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        F.l1_loss(kx, kx, reduction="bad")


# ---- binary cross entropy ----------------------------------------------------------------------


def probabilities(shape, dtype, seed):
    t, _ = make(shape, "float64", seed=seed, low=0.02, high=0.98)
    t.view(-1)[:2] = torch.tensor([0.0, 1.0])  # exercise the log clamp at -100
    t = t.to(getattr(torch, dtype))
    return t, to_kiln(t)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(dtype, reduction):
    tx, kx = probabilities((4, 5), dtype, 0)
    ty, ky = probabilities((4, 5), dtype, 1)
    check(*both("binary_cross_entropy", (tx, ty), (kx, ky), reduction=reduction))
    tw, kw = make((5,), "float64", seed=2, low=0.0, high=2.0)
    check(*both("binary_cross_entropy", (tx, ty, tw), (kx, ky, kw), reduction=reduction))


def test_binary_cross_entropy_errors():
    _, kx = probabilities((2, 3), "float32", 0)
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(kx * 3.0, kx)
    with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
        F.binary_cross_entropy(kx, kx * -1.0)
    with pytest.raises(ValueError, match=r"target size \(\[3\]\).*input size \(\[2, 3\]\)"):
        F.binary_cross_entropy(kx, kx.select(0, 0))
    with pytest.raises(RuntimeError, match="same dtype.*float32.*float64"):
        F.binary_cross_entropy(kx, kx.double())
    with pytest.raises(RuntimeError, match=r"weight of shape \[2, 2, 3\] must broadcast"):
        F.binary_cross_entropy(kx, kx, weight=make((2, 2, 3), "float32")[1])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weights", ["none", "weight", "pos_weight", "both"])
def test_binary_cross_entropy_with_logits(dtype, reduction, weights):
    tx, kx = make((4, 5), dtype, low=-6.0, high=6.0)
    ty, ky = probabilities((4, 5), dtype, 1)
    kwargs_t, kwargs_k = {}, {}
    if weights in ("weight", "both"):
        tw, kw = make((4, 1), dtype, seed=2, low=0.0, high=2.0)
        kwargs_t["weight"], kwargs_k["weight"] = tw, kw
    if weights in ("pos_weight", "both"):
        tp, kp = make((5,), dtype, seed=3, low=0.5, high=3.0)
        kwargs_t["pos_weight"], kwargs_k["pos_weight"] = tp, kp
    want = TF.binary_cross_entropy_with_logits(tx, ty, reduction=reduction, **kwargs_t)
    got = F.binary_cross_entropy_with_logits(kx, ky, reduction=reduction, **kwargs_k)
    check(got, want)


def test_binary_cross_entropy_with_logits_stability_dtypes_and_top_level():
    tx = torch.tensor([[-200.0, -30.0, 0.0, 30.0, 200.0]])
    ty = torch.tensor([[0.0, 1.0, 0.5, 0.0, 1.0]])
    kx, ky = to_kiln(tx), to_kiln(ty)
    check(*both("binary_cross_entropy_with_logits", (tx, ty), (kx, ky), reduction="none"))
    # The result takes the target's dtype, as torch's does.
    check(*both("binary_cross_entropy_with_logits", (tx.double(), ty), (kx.double(), ky)))
    check(*both("binary_cross_entropy_with_logits", (tx, ty.double()), (kx, ky.double())))
    want = torch.binary_cross_entropy_with_logits(tx, ty, None, None, 2)
    check(kiln.binary_cross_entropy_with_logits(kx, ky, None, None, 2), want)


def test_binary_cross_entropy_with_logits_errors():
    _, kx = make((2, 3), "float32")
    with pytest.raises(ValueError, match=r"target size \(\[3\]\) must be the same as input size"):
        F.binary_cross_entropy_with_logits(kx, kx.select(0, 0))
    with pytest.raises(RuntimeError, match="float32 can't be cast.*int64"):
        F.binary_cross_entropy_with_logits(kx, make((2, 3), "int64")[1])
    with pytest.raises(RuntimeError, match=r"pos_weight of shape \[4\] must broadcast|cannot be"):
        F.binary_cross_entropy_with_logits(kx, kx, pos_weight=make((4,), "float32")[1])
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.binary_cross_entropy_with_logits(kx, kx, reduction="avg")


# ---- kl_div ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(dtype, reduction, log_target):
    tx = torch.log_softmax(make((4, 5), "float64")[0], dim=1).to(getattr(torch, dtype))
    tt = torch.softmax(make((4, 5), "float64", seed=1)[0], dim=1)
    tt[0, 0] = 0.0  # xlogy(0, 0) = 0
    tt = (tt.log() if log_target else tt).to(getattr(torch, dtype))
    got, want = both(
        "kl_div", (tx, tt), (to_kiln(tx), to_kiln(tt)), reduction=reduction, log_target=log_target
    )
    check(got, want)


def test_kl_div_broadcast_0d_empty_negative_targets_and_top_level():
    tx, kx = make((4, 3), "float32")
    tt, kt = make((3,), "float32", seed=1, low=0.0, high=1.0)
    check(*both("kl_div", (tx, tt), (kx, kt), reduction="none"))
    t0, k0 = make((), "float32", seed=2, low=0.1, high=1.0)
    check(*both("kl_div", (t0, t0), (k0, k0), reduction="batchmean"))
    te, ke = make((0, 3), "float32")
    check(*both("kl_div", (te, te), (ke, ke), reduction="batchmean"))
    tn = torch.tensor([[0.0, -1.0, 2.0]])
    check(*both("kl_div", (tx, tn), (kx, to_kiln(tn)), reduction="none"))
    check(kiln.kl_div(kx, kt, 2, log_target=True), torch.kl_div(tx, tt, 2, log_target=True))


def test_kl_div_errors():
    _, ki = make((2, 3), "int64")
    with pytest.raises(RuntimeError, match="kl_div: integral inputs not supported"):
        F.kl_div(ki, ki, reduction="sum")
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        F.kl_div(ki.float(), ki.float())
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        kiln.kl_div(make((2, 3), "float32")[1], make((2, 3), "float32")[1], 7)
