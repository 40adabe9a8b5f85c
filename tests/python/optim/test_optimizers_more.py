"""Adamax, NAdam, RAdam, Adadelta, Rprop and ASGD compared step by step with torch.optim on the
same float64 parameters and gradients: parameters and state for each option, state dicts
(layout, round trips, torch's loaded into kiln, old numeric counters), param groups, missing
gradients, tensor lrs, differentiating through the update, a small model trained with
backward, and the constructor signatures and validation errors."""

import inspect

import numpy as np
import pytest
import torch
from optim_util import (
    assert_params_close,
    assert_state_dicts_match,
    kiln_param,
    make_params,
    run_steps,
    set_grads,
    state_dict_to_kiln,
    to_numpy,
)

import kiln
import kiln.nn as knn
import kiln.optim as koptim

NAMES = ["Adamax", "NAdam", "RAdam", "Adadelta", "Rprop", "ASGD"]
STEPS = 25  # RAdam's rectified update starts at step 6; ASGD with t0=5 averages after it

CONFIGS = [
    ("Adamax", {}),
    ("Adamax", {"lr": 0.01, "betas": (0.8, 0.95), "eps": 1e-4}),
    ("Adamax", {"lr": 0.01, "weight_decay": 0.1}),
    ("Adamax", {"lr": 0.01, "weight_decay": 0.05, "maximize": True, "foreach": False}),
    ("NAdam", {}),
    ("NAdam", {"lr": 0.01, "momentum_decay": 0.05, "betas": (0.85, 0.99)}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.05, "maximize": True, "eps": 1e-6}),
    ("RAdam", {}),
    ("RAdam", {"lr": 0.01, "betas": (0.9, 0.9)}),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.1}),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.05, "maximize": True, "eps": 1e-6}),
    ("Adadelta", {}),
    ("Adadelta", {"lr": 0.5, "rho": 0.7, "eps": 1e-4}),
    ("Adadelta", {"weight_decay": 0.1}),
    ("Adadelta", {"lr": 0.3, "weight_decay": 0.05, "maximize": True}),
    ("Rprop", {}),
    ("Rprop", {"lr": 0.05, "etas": (0.3, 1.7), "step_sizes": (1e-3, 0.08)}),
    ("Rprop", {"lr": 0.02, "maximize": True}),
    ("ASGD", {}),
    ("ASGD", {"lr": 0.05, "lambd": 0.1, "alpha": 0.5, "t0": 5}),
    ("ASGD", {"lr": 0.05, "t0": 3, "weight_decay": 0.1}),
    ("ASGD", {"lr": 0.05, "t0": 0, "maximize": True, "weight_decay": 0.05}),
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for name, kw in CONFIGS]
# One config per optimizer with its distinctive options on, for the broader tests.
MAIN = {
    "Adamax": {"lr": 0.01, "weight_decay": 0.1},
    "NAdam": {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True},
    "RAdam": {"lr": 0.01, "weight_decay": 0.1},
    "Adadelta": {"lr": 0.5, "weight_decay": 0.1},
    "Rprop": {"lr": 0.02, "etas": (0.4, 1.3)},
    "ASGD": {"lr": 0.05, "lambd": 0.01, "t0": 4, "weight_decay": 0.1},
}
MAIN_ITEMS = list(MAIN.items())
MAIN_IDS = list(MAIN)


def build(name, kwargs, tparams, kparams):
    return getattr(torch.optim, name)(tparams, **kwargs), getattr(koptim, name)(kparams, **kwargs)


def assert_states_close(kopt, topt, kparams, tparams, dtype="float64"):
    """Both optimizers' per-parameter state, and their whole state dicts, agree."""
    for kp, tp in zip(kparams, tparams, strict=True):
        assert sorted(kopt.state[kp]) == sorted(topt.state[tp])
    assert_state_dicts_match(kopt.state_dict(), topt.state_dict(), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=IDS)
def test_steps_match_torch(name, kwargs, dtype):
    tparams, kparams = make_params(dtype)
    topt, kopt = build(name, kwargs, tparams, kparams)
    run_steps(topt, kopt, tparams, kparams, np.random.default_rng(1), steps=STEPS)
    assert_states_close(kopt, topt, kparams, tparams, dtype)


EXACT = [(n, kw) for n, kw in CONFIGS if n in ("Adamax", "Rprop", "ASGD")]


@pytest.mark.parametrize("name,kwargs", EXACT, ids=[i for i in IDS if i.split("-")[0] in
                                                    ("Adamax", "Rprop", "ASGD")])
def test_float64_parameters_are_torchs_bit_for_bit(name, kwargs):
    """Each update is torch's single-tensor update op for op, so where no float64 addcmul
    feeds the parameters (torch's fuses its multiply-add on some CPUs, an ulp per step; the
    others are bounded by test_steps_match_torch) they do not drift from torch's at all."""
    tparams, kparams = make_params("float64", seed=11)
    topt, kopt = build(name, kwargs, tparams, kparams)
    rng = np.random.default_rng(12)
    for _ in range(STEPS):
        set_grads(tparams, kparams, rng)
        topt.step()
        kopt.step()
    for kp, tp in zip(kparams, tparams, strict=True):
        np.testing.assert_array_equal(to_numpy(kp), to_numpy(tp))


def test_radam_switches_to_the_rectified_update():
    """The first steps of RAdam (rho_t <= 5) are bias-corrected momentum SGD; later ones are
    rectified and adaptive. Both branches must agree with torch, so the run covers both."""
    tparams, kparams = make_params("float64", seed=3)
    topt, kopt = build("RAdam", {"lr": 0.05}, tparams, kparams)
    rng = np.random.default_rng(4)
    run_steps(topt, kopt, tparams, kparams, rng, steps=5)
    moved = [to_numpy(p) for p in kparams]
    run_steps(topt, kopt, tparams, kparams, rng, steps=3)
    assert any(not np.array_equal(m, to_numpy(p)) for m, p in zip(moved, kparams, strict=True))
    assert kopt.state[kparams[0]]["step"].item() == 8.0


def test_asgd_averages_after_t0():
    """``ax`` copies the iterate until step t0 + 1, then is a running average (mu < 1)."""
    tparams, kparams = make_params("float64", seed=5)
    topt, kopt = build("ASGD", {"lr": 0.1, "t0": 2}, tparams, kparams)
    rng = np.random.default_rng(6)
    run_steps(topt, kopt, tparams, kparams, rng, steps=2)
    st = kopt.state[kparams[0]]
    np.testing.assert_array_equal(to_numpy(st["ax"]), to_numpy(kparams[0]))
    run_steps(topt, kopt, tparams, kparams, rng, steps=4)
    assert st["mu"].item() == pytest.approx(1 / 4)
    assert not np.array_equal(to_numpy(st["ax"]), to_numpy(kparams[0]))
    assert_states_close(kopt, topt, kparams, tparams)


def test_rprop_zero_gradients_and_sign_flips():
    """Gradient coordinates that are exactly zero (step size kept) or flip sign (step size
    shrunk and the move skipped) follow torch's masks."""
    tparams, kparams = make_params("float64", seed=7)
    topt, kopt = build("Rprop", {"lr": 0.05, "etas": (0.25, 1.5)}, tparams, kparams)
    rng = np.random.default_rng(8)
    for _ in range(STEPS):
        for tp, kp in zip(tparams, kparams, strict=True):
            g = rng.standard_normal(tuple(tp.shape))
            g[rng.random(g.shape) < 0.3] = 0.0
            tp.grad, kp.grad = torch.from_numpy(g.copy()), kiln.from_numpy(g.copy())
        topt.step()
        kopt.step()
        assert_params_close(kparams, tparams)
    sizes = to_numpy(kopt.state[kparams[1]]["step_size"])
    assert len(np.unique(sizes)) > 3  # grown, shrunk and kept coordinates all occur
    assert_states_close(kopt, topt, kparams, tparams)


@pytest.mark.parametrize("name,kwargs", MAIN_ITEMS, ids=MAIN_IDS)
def test_state_dict_round_trip_then_continue(name, kwargs):
    """kiln's state dict has torch's layout and, loaded into a fresh optimizer over copies of
    the parameters, continues exactly as torch's own round trip does (loading casts the
    0-d ``mu_product``/``eta``/``mu`` to the parameters' dtype in both)."""
    tparams, kparams = make_params("float64", seed=2)
    topt, kopt = build(name, kwargs, tparams, kparams)
    rng = np.random.default_rng(3)
    run_steps(topt, kopt, tparams, kparams, rng, steps=10)
    assert_states_close(kopt, topt, kparams, tparams)

    tparams2 = [torch.nn.Parameter(p.detach().clone()) for p in tparams]
    kparams2 = [kiln_param(to_numpy(p)) for p in kparams]
    topt2, kopt2 = build(name, kwargs, tparams2, kparams2)
    topt2.load_state_dict(topt.state_dict())
    kopt2.load_state_dict(kopt.state_dict())
    assert_states_close(kopt2, topt2, kparams2, tparams2)
    run_steps(topt2, kopt2, tparams2, kparams2, rng, steps=10)
    assert_states_close(kopt2, topt2, kparams2, tparams2)


@pytest.mark.parametrize("name,kwargs", MAIN_ITEMS, ids=MAIN_IDS)
def test_load_torch_state_dict_then_continue(name, kwargs):
    """torch's state dict, tensors converted to kiln, loads into kiln (same layout)."""
    tparams, _ = make_params("float64", seed=4)
    topt = getattr(torch.optim, name)(tparams, **kwargs)
    rng = np.random.default_rng(5)
    for _ in range(8):
        for tp in tparams:
            tp.grad = torch.from_numpy(rng.standard_normal(tuple(tp.shape)))
        topt.step()
    kparams = [kiln_param(to_numpy(p)) for p in tparams]
    kopt = getattr(koptim, name)(kparams, **kwargs)
    kopt.load_state_dict(state_dict_to_kiln(topt.state_dict()))
    topt.load_state_dict(topt.state_dict())  # the same casts of the 0-d counters on torch's side
    assert_states_close(kopt, topt, kparams, tparams)
    run_steps(topt, kopt, tparams, kparams, rng, steps=8)
    assert_states_close(kopt, topt, kparams, tparams)


COUNTERS = {"NAdam": ("step", "mu_product"), "ASGD": ("step", "eta", "mu")}


@pytest.mark.parametrize("name,kwargs", MAIN_ITEMS, ids=MAIN_IDS)
def test_old_checkpoint_with_numeric_counters(name, kwargs):
    """Checkpoints from before counters were tensors keep them as numbers; loading makes
    them 0-d tensors of the step dtype, as torch does, and training continues alike."""
    tparams, kparams = make_params("float64", seed=9)
    topt, kopt = build(name, kwargs, tparams, kparams)
    rng = np.random.default_rng(10)
    run_steps(topt, kopt, tparams, kparams, rng, steps=6)
    tsd, ksd = topt.state_dict(), kopt.state_dict()
    for sd in (tsd, ksd):
        sd["state"] = {
            i: {k: (v.item() if k in COUNTERS.get(name, ("step",)) else v) for k, v in s.items()}
            for i, s in sd["state"].items()
        }
    topt.load_state_dict(tsd)
    kopt.load_state_dict(ksd)
    for key in COUNTERS.get(name, ("step",)):
        kv, tv = kopt.state[kparams[0]][key], topt.state[tparams[0]][key]
        assert isinstance(kv, kiln.Tensor) and kv.dim() == 0
        assert kv.dtype.name == str(tv.dtype).replace("torch.", "") == "float32"
        assert kv.item() == tv.item()
    run_steps(topt, kopt, tparams, kparams, rng, steps=6)
    assert_states_close(kopt, topt, kparams, tparams)


@pytest.mark.parametrize("name", NAMES)
def test_param_groups_with_own_hyperparameters(name):
    tparams, kparams = make_params("float64", seed=6)

    def groups(ps):
        return [{"params": [ps[0]], "lr": 0.03}, {"params": ps[1:], "maximize": True}]

    topt = getattr(torch.optim, name)(groups(tparams), lr=0.01)
    kopt = getattr(koptim, name)(groups(kparams), lr=0.01)
    assert [g["lr"] for g in kopt.param_groups] == [g["lr"] for g in topt.param_groups]
    run_steps(topt, kopt, tparams, kparams, np.random.default_rng(7), steps=STEPS)
    assert_states_close(kopt, topt, kparams, tparams)


@pytest.mark.parametrize("name,kwargs", MAIN_ITEMS, ids=MAIN_IDS)
def test_params_without_grad_are_skipped(name, kwargs):
    tparams, kparams = make_params("float64", seed=8)
    topt, kopt = build(name, kwargs, tparams, kparams)
    before = to_numpy(kparams[1])
    rng = np.random.default_rng(9)
    run_steps(topt, kopt, tparams, kparams, rng, steps=5, skip={1})
    np.testing.assert_array_equal(to_numpy(kparams[1]), before)
    assert kparams[1] not in kopt.state
    run_steps(topt, kopt, tparams, kparams, rng, steps=5, skip={0})
    assert_states_close(kopt, topt, kparams, tparams)


@pytest.mark.parametrize("lr_dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,kwargs", MAIN_ITEMS, ids=MAIN_IDS)
def test_tensor_lr(name, kwargs, lr_dtype):
    """A 0-d tensor lr (as torch allows): the update computes with it in its dtype as torch
    does, and it survives a state dict round trip."""
    kwargs = {k: v for k, v in kwargs.items() if k != "lr"}
    tparams, kparams = make_params("float64")
    tlr = torch.tensor(0.03, dtype=getattr(torch, lr_dtype))
    klr = kiln.tensor(0.03, dtype=getattr(kiln, lr_dtype))
    topt = getattr(torch.optim, name)(tparams, lr=tlr, **kwargs)
    kopt = getattr(koptim, name)(kparams, lr=klr, **kwargs)
    rng = np.random.default_rng(0)
    run_steps(topt, kopt, tparams, kparams, rng, steps=10)
    assert_states_close(kopt, topt, kparams, tparams)
    kparams2 = [kiln_param(to_numpy(p)) for p in kparams]
    kopt2 = getattr(koptim, name)(kparams2, lr=kiln.tensor(1.0), **kwargs)
    kopt2.load_state_dict(kopt.state_dict())
    topt.load_state_dict(topt.state_dict())  # the same casts of the 0-d counters on torch's side
    assert kopt2.param_groups[0]["lr"].item() == topt.param_groups[0]["lr"].item()
    run_steps(topt, kopt2, tparams, kparams2, rng, steps=10)


@pytest.mark.parametrize("name,kwargs", MAIN_ITEMS, ids=MAIN_IDS)
def test_foreach_true_matches_torchs_foreach(name, kwargs):
    """``foreach=True`` is stored and runs the single-tensor update; torch's foreach path is
    the same algorithm over lists, with a few operations in another order (ASGD's computes
    ``eta`` from the float32 step tensor and folds the decay into one addcmul, so it agrees
    only to float32 round-off of ``eta``)."""
    tparams, kparams = make_params("float64")
    topt, kopt = build(name, {**kwargs, "foreach": True}, tparams, kparams)
    rng = np.random.default_rng(2)
    for _ in range(STEPS):
        set_grads(tparams, kparams, rng)
        topt.step()
        kopt.step()
    for kp, tp in zip(kparams, tparams, strict=True):
        tol = (1e-6, 1e-7) if name == "ASGD" else (1e-12, 1e-14)
        np.testing.assert_allclose(to_numpy(kp), to_numpy(tp), rtol=tol[0], atol=tol[1])
    assert kopt.param_groups[0]["foreach"] is True


@pytest.mark.parametrize("name,kwargs", MAIN_ITEMS, ids=MAIN_IDS)
def test_capturable_runs_the_same_update(name, kwargs):
    """torch refuses ``capturable=True`` for CPU parameters; kiln has no graph capture to
    guard, so it keeps the flag and runs the plain update."""
    tparams, kparams = make_params("float64")
    topt = getattr(torch.optim, name)(tparams, **kwargs)
    kopt = getattr(koptim, name)(kparams, **kwargs, capturable=True)
    run_steps(topt, kopt, tparams, kparams, np.random.default_rng(3), steps=10)
    assert kopt.param_groups[0]["capturable"] is True


@pytest.mark.parametrize("name", NAMES)
def test_foreach_with_differentiable_fails_at_step(name):
    """torch's foreach path cannot be differentiated and says so when it steps."""
    tparams, kparams = make_params("float64")
    topt, kopt = build(name, {"foreach": True, "differentiable": True}, tparams, kparams)
    set_grads(tparams, kparams, np.random.default_rng(0))
    with pytest.raises(AssertionError, match="_foreach ops don't support autograd") as terr:
        topt.step()
    with pytest.raises(AssertionError) as kerr:
        kopt.step()
    assert str(kerr.value) == str(terr.value)


# kiln's autograd saves some operands whose gradient no update needs (a constant factor of a
# product, addcmul's constant operands) and then sees them modified in place by the next step,
# so Adamax, Rprop and the L2-decay variants of NAdam/RAdam cannot be differentiated through
# yet (Adamax cannot in torch either). These can.
DIFFERENTIABLE = [
    ("NAdam", {"decoupled_weight_decay": True, "weight_decay": 0.1, "maximize": True}),
    ("NAdam", {}),
    ("RAdam", {"decoupled_weight_decay": True, "weight_decay": 0.1}),
    ("Adadelta", {"weight_decay": 0.1, "maximize": True}),
    ("ASGD", {"weight_decay": 0.1, "t0": 3}),
]


@pytest.mark.parametrize("name,kwargs", DIFFERENTIABLE,
                         ids=[f"{n}-{'-'.join(kw)}" for n, kw in DIFFERENTIABLE])
def test_differentiable_through_the_update(name, kwargs):
    """With ``differentiable=True`` the steps are recorded by autograd (the parameters are
    non-leaf copies of a leaf): the updated values and the gradient of a loss on them with
    respect to the leaf are torch's (NAdam's tensor-valued variant included)."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(6)
    grads = [rng.standard_normal(6) for _ in range(8)]
    out = []
    for fw, optim in ((torch, torch.optim), (kiln, koptim)):
        w = fw.from_numpy(w0.copy()).requires_grad_()
        x = w.clone()
        opt = getattr(optim, name)([x], lr=0.05, differentiable=True, **kwargs)
        for g in grads:
            x.grad = fw.from_numpy(g.copy())
            opt.step()
        (x * x).sum().backward()
        out.append((to_numpy(x), to_numpy(w.grad)))
    (tx, tg), (kx, kg) = out
    np.testing.assert_allclose(kx, tx, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(kg, tg, rtol=1e-13, atol=1e-15)
    if kwargs.get("weight_decay"):  # the update's dependence on w is in the gradient
        assert not np.allclose(kg, 2 * kx)


@pytest.mark.parametrize("name,kwargs", MAIN_ITEMS, ids=MAIN_IDS)
def test_training_loop_with_backward_matches_torch(name, kwargs):
    """A small float64 regression trained end to end (backward, zero_grad, step) for 20
    steps. Forward and backward round like torch's to an ulp or so, hence the tolerance."""
    if not hasattr(kiln.Tensor, "backward"):
        pytest.skip("kiln autograd is not available in this build")
    rng = np.random.default_rng(0)
    init = [rng.standard_normal((8, 4)), np.zeros(8), rng.standard_normal((1, 8)), np.zeros(1)]

    def model(fw, nn):
        net = nn.Sequential(nn.Linear(4, 8, dtype=fw.float64), nn.Tanh(),
                            nn.Linear(8, 1, dtype=fw.float64))
        with fw.no_grad():
            for p, v in zip(net.parameters(), init, strict=True):
                p.copy_(fw.from_numpy(v.copy()))
        return net

    tnet, knet = model(torch, torch.nn), model(kiln, knn)
    topt = getattr(torch.optim, name)(tnet.parameters(), **kwargs)
    kopt = getattr(koptim, name)(knet.parameters(), **kwargs)
    for _ in range(20):
        x, y = rng.standard_normal((16, 4)), rng.standard_normal((16, 1))
        tloss = ((tnet(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
        kloss = ((knet(kiln.from_numpy(x)) - kiln.from_numpy(y)) ** 2).mean()
        np.testing.assert_allclose(kloss.item(), tloss.item(), rtol=1e-10)
        topt.zero_grad()
        kopt.zero_grad()
        tloss.backward()
        kloss.backward()
        topt.step()
        kopt.step()
    for kp, tp in zip(knet.parameters(), tnet.parameters(), strict=True):
        np.testing.assert_allclose(to_numpy(kp), to_numpy(tp), rtol=1e-10, atol=1e-12)


def test_closure_returns_the_loss():
    """The closure runs first (with grad enabled) and its gradients are the ones used."""
    tparams, kparams = make_params("float64")
    topt, kopt = build("NAdam", {}, tparams, kparams)
    seen = []

    def closure():
        seen.append(kiln.is_grad_enabled())
        set_grads(tparams, kparams, np.random.default_rng(0))
        return 1.25

    assert kopt.step(closure) == 1.25
    assert seen == [True]
    topt.step()
    assert_params_close(kparams, tparams)


def test_state_dtypes_follow_default_dtype():
    """With float64 as the default dtype torch keeps ``step`` and the 0-d NAdam/ASGD
    counters in float64; kiln's state dicts carry the same dtypes and values."""
    prev_t, prev_k = torch.get_default_dtype(), kiln.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    kiln.set_default_dtype(kiln.float64)
    try:
        for name, kwargs in MAIN_ITEMS:
            tparams, kparams = make_params("float32")
            topt, kopt = build(name, kwargs, tparams, kparams)
            run_steps(topt, kopt, tparams, kparams, np.random.default_rng(0), steps=6)
            for key, tv in topt.state[tparams[0]].items():
                kv = kopt.state[kparams[0]][key]
                assert kv.dtype.name == str(tv.dtype).replace("torch.", ""), (name, key)
            assert_states_close(kopt, topt, kparams, tparams, "float32")
    finally:
        torch.set_default_dtype(prev_t)
        kiln.set_default_dtype(prev_k)


@pytest.mark.parametrize("name", NAMES)
def test_signature_and_defaults_match_torch(name):
    """Same parameter names, order, kinds and defaults, so calls written for torch (keyword
    or positional) mean the same; and the param groups hold the same keys."""
    ksig = inspect.signature(getattr(koptim, name))
    tsig = inspect.signature(getattr(torch.optim, name))
    assert [(p.name, p.kind, p.default) for p in ksig.parameters.values()] == [
        (p.name, p.kind, p.default) for p in tsig.parameters.values()
    ]
    tparams, kparams = make_params("float64")
    topt, kopt = build(name, {}, tparams, kparams)
    assert kopt.defaults == topt.defaults
    assert repr(kopt) == repr(topt)
    assert name in koptim.__all__


ERRORS = [
    ("Adamax", {"lr": -0.1}),
    ("Adamax", {"eps": -1.0}),
    ("Adamax", {"betas": (1.0, 0.9)}),
    ("Adamax", {"betas": (0.9, -0.5)}),
    ("Adamax", {"weight_decay": -1e-3}),
    ("NAdam", {"lr": -1.0}),
    ("NAdam", {"betas": (0.9, 1.0)}),
    ("NAdam", {"momentum_decay": -0.1}),
    ("NAdam", {"weight_decay": -0.1}),
    ("RAdam", {"eps": -1e-8}),
    ("RAdam", {"betas": (-0.1, 0.9)}),
    ("RAdam", {"weight_decay": -2.0}),
    ("Adadelta", {"lr": -1.0}),
    ("Adadelta", {"rho": 1.5}),
    ("Adadelta", {"rho": -0.5}),
    ("Adadelta", {"eps": -1.0}),
    ("Adadelta", {"weight_decay": -1.0}),
    ("Rprop", {"lr": -0.01}),
    ("Rprop", {"etas": (1.0, 1.2)}),
    ("Rprop", {"etas": (0.5, 1.0)}),
    ("Rprop", {"etas": (0.0, 2.0)}),
    ("ASGD", {"lr": -0.01}),
    ("ASGD", {"weight_decay": -0.01}),
]


@pytest.mark.parametrize("name,kwargs", ERRORS,
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items())}"
                              for n, kw in ERRORS])
def test_validation_errors_match_torch(name, kwargs):
    tparams, kparams = make_params("float64")
    with pytest.raises(ValueError) as terr:
        getattr(torch.optim, name)(tparams, **kwargs)
    with pytest.raises(ValueError) as kerr:
        getattr(koptim, name)(kparams, **kwargs)
    assert str(kerr.value) == str(terr.value)


@pytest.mark.parametrize("name", NAMES)
def test_bad_params_and_tensor_lr_errors(name):
    cls = getattr(koptim, name)
    with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
        cls(make_params("float64")[1], lr=kiln.tensor([0.1, 0.2]))
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        cls([])
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        cls(kiln_param(np.zeros(3)))
    with pytest.raises(TypeError, match="ordered collections"):
        cls([{"params": set(make_params("float64")[1])}])
