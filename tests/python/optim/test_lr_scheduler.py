"""kiln.optim.lr_scheduler compared with torch.optim.lr_scheduler: lr (and momentum) sequences
over 30 steps, chained and sequential schedules, step(epoch), state dicts and resuming, and
the warnings and errors."""

import warnings

import numpy as np
import pytest
import torch
import torch.optim.lr_scheduler as tsched
from optim_util import kiln_param, torch_param

import kiln.optim as koptim
import kiln.optim.lr_scheduler as ksched

STEPS = 30


def optimizers(name="SGD", lrs=(0.1,), **kwargs):
    """A torch and a kiln optimizer with one parameter per group and the given group lrs."""
    zeros = np.zeros(3, np.float32)
    tgroups = [{"params": [torch_param(zeros)], "lr": lr} for lr in lrs]
    kgroups = [{"params": [kiln_param(zeros)], "lr": lr} for lr in lrs]
    return getattr(torch.optim, name)(tgroups, **kwargs), getattr(koptim, name)(kgroups, **kwargs)


def group_values(opt, key):
    return [g[key] for g in opt.param_groups]


def run(topt, kopt, tscheds, kscheds, steps=STEPS, keys=("lr",)):
    """Steps both (optimizer first, then each scheduler) and checks every value each step."""
    for _ in range(steps):
        topt.step()
        kopt.step()
        for ts, ks in zip(tscheds, kscheds, strict=True):
            ts.step()
            ks.step()
            assert ks.get_last_lr() == ts.get_last_lr()
        for key in keys:
            assert group_values(kopt, key) == group_values(topt, key), key


SCHEDULES = [
    ("StepLR", {"step_size": 3, "gamma": 0.5}),
    ("StepLR", {"step_size": 1, "gamma": 0.9}),
    ("MultiStepLR", {"milestones": [5, 10, 10, 20], "gamma": 0.3}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("CosineAnnealingLR", {"T_max": 10, "eta_min": 0.001}),
    ("CosineAnnealingLR", {"T_max": 7}),
    ("LambdaLR", {"lr_lambda": lambda e: 0.95**e}),
    ("LambdaLR", {"lr_lambda": lambda e: 1.0 / (e + 1)}),
    ("LinearLR", {}),
    ("LinearLR", {"start_factor": 0.25, "total_iters": 8}),
    ("LinearLR", {"start_factor": 1.0, "end_factor": 0.1, "total_iters": 12}),
    ("OneCycleLR", {"max_lr": 1.0, "total_steps": STEPS}),
    ("OneCycleLR", {"max_lr": 0.5, "epochs": 3, "steps_per_epoch": 10, "three_phase": True}),
    ("OneCycleLR", {"max_lr": [0.4, 0.2], "total_steps": 40, "anneal_strategy": "linear"}),
    ("OneCycleLR", {"max_lr": 0.3, "total_steps": 35, "cycle_momentum": False}),
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(SCHEDULES)]


@pytest.mark.parametrize("name,kwargs", SCHEDULES, ids=IDS)
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_lr_sequence_matches_torch(name, kwargs, opt_name):
    extra = {"momentum": 0.9} if opt_name == "SGD" else {}
    topt, kopt = optimizers(opt_name, lrs=(0.1, 0.05), **extra)
    ts = getattr(tsched, name)(topt, **kwargs)
    ks = getattr(ksched, name)(kopt, **kwargs)
    assert ks.get_last_lr() == ts.get_last_lr()
    assert ks.last_epoch == ts.last_epoch == 0
    cycles = name == "OneCycleLR" and kwargs.get("cycle_momentum", True)
    momentum_key = "momentum" if opt_name == "SGD" else "betas"
    keys = ("lr", "initial_lr") + ((momentum_key,) if cycles else ())
    run(topt, kopt, [ts], [ks], keys=keys)
    assert ks.last_epoch == ts.last_epoch


def test_lambda_per_group():
    topt, kopt = optimizers(lrs=(0.1, 0.2))
    lambdas = [lambda e: e // 7, lambda e: 0.9**e]
    ts, ks = tsched.LambdaLR(topt, lambdas), ksched.LambdaLR(kopt, lambdas)
    run(topt, kopt, [ts], [ks])


def test_chained_schedulers_compose():
    topt, kopt = optimizers(lrs=(0.1,))
    tss = [tsched.StepLR(topt, 4, 0.5), tsched.ExponentialLR(topt, 0.95)]
    kss = [ksched.StepLR(kopt, 4, 0.5), ksched.ExponentialLR(kopt, 0.95)]
    run(topt, kopt, tss, kss)


@pytest.mark.parametrize("milestones", [[5], [4, 15]])
def test_sequential_lr(milestones):
    topt, kopt = optimizers(lrs=(0.1, 0.03))

    def make(mod, opt):
        scheds = [
            mod.LinearLR(opt, start_factor=0.1, total_iters=5),
            mod.CosineAnnealingLR(opt, T_max=12, eta_min=1e-4),
            mod.ExponentialLR(opt, gamma=0.9),
        ][: len(milestones) + 1]
        return mod.SequentialLR(opt, scheds, milestones=milestones)

    ts, ks = make(tsched, topt), make(ksched, kopt)
    assert ks.get_last_lr() == ts.get_last_lr()
    run(topt, kopt, [ts], [ks])
    assert [s.last_epoch for s in ks._schedulers] == [s.last_epoch for s in ts._schedulers]


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("StepLR", {"step_size": 3, "gamma": 0.5}),
        ("MultiStepLR", {"milestones": [2, 6, 6], "gamma": 0.5}),
        ("ExponentialLR", {"gamma": 0.8}),
        ("CosineAnnealingLR", {"T_max": 9, "eta_min": 0.01}),
        ("LinearLR", {"start_factor": 0.2, "total_iters": 6}),
    ],
)
def test_step_with_epoch_uses_closed_form(name, kwargs):
    topt, kopt = optimizers()
    ts, ks = getattr(tsched, name)(topt, **kwargs), getattr(ksched, name)(kopt, **kwargs)
    topt.step()
    kopt.step()
    for epoch in [3, 7, 1, 12, 12, 25]:
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step\\(\\)`"):
            ks.step(epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts.step(epoch)
        assert ks.get_last_lr() == ts.get_last_lr()


def comparable(sd):
    return {k: v for k, v in sd.items() if k != "lr_lambdas"}


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("StepLR", {"step_size": 4, "gamma": 0.5}),
        ("MultiStepLR", {"milestones": [3, 9], "gamma": 0.2}),
        ("CosineAnnealingLR", {"T_max": 10}),
        ("LinearLR", {"total_iters": 12}),
        ("LambdaLR", {"lr_lambda": lambda e: 0.97**e}),
        ("OneCycleLR", {"max_lr": 0.9, "total_steps": STEPS}),
    ],
)
def test_state_dict_matches_torch_and_resumes(name, kwargs):
    topt, kopt = optimizers(lrs=(0.1, 0.04), momentum=0.9)
    ts, ks = getattr(tsched, name)(topt, **kwargs), getattr(ksched, name)(kopt, **kwargs)
    run(topt, kopt, [ts], [ks], steps=10)
    ksd, tsd = ks.state_dict(), ts.state_dict()
    assert comparable(ksd) == comparable(tsd)
    if name == "LambdaLR":
        assert ksd["lr_lambdas"] == tsd["lr_lambdas"] == [None, None]
    # Resume: a fresh optimizer and scheduler loaded from the saved states, the scheduler
    # built before the optimizer loads (building it writes the groups' lr, as in torch).
    _, kopt2 = optimizers(lrs=(0.1, 0.04), momentum=0.9)
    ks2 = getattr(ksched, name)(kopt2, **kwargs)
    kopt2.load_state_dict(kopt.state_dict())
    ks2.load_state_dict(ksd)
    run(topt, kopt2, [ts], [ks2], steps=STEPS - 10)


def test_sequential_state_dict_and_resume():
    def make(mod, opt):
        a = mod.LinearLR(opt, start_factor=0.5, total_iters=4)
        b = mod.StepLR(opt, step_size=3, gamma=0.7)
        return mod.SequentialLR(opt, [a, b], milestones=[6])

    topt, kopt = optimizers()
    ts, ks = make(tsched, topt), make(ksched, kopt)
    run(topt, kopt, [ts], [ks], steps=8)
    ksd, tsd = ks.state_dict(), ts.state_dict()
    assert ksd == tsd
    _, kopt2 = optimizers()
    ks2 = make(ksched, kopt2)
    kopt2.load_state_dict(kopt.state_dict())
    ks2.load_state_dict(ksd)
    run(topt, kopt2, [ts], [ks2], steps=10)


def test_resume_with_last_epoch_needs_initial_lr():
    topt, kopt = optimizers()
    with pytest.raises(KeyError) as t_err:
        tsched.StepLR(topt, 2, last_epoch=4)
    with pytest.raises(KeyError) as k_err:
        ksched.StepLR(kopt, 2, last_epoch=4)
    assert str(k_err.value) == str(t_err.value)
    for opt in (topt, kopt):
        opt.param_groups[0]["initial_lr"] = 0.2
    ts, ks = tsched.StepLR(topt, 2, last_epoch=4), ksched.StepLR(kopt, 2, last_epoch=4)
    assert ks.last_epoch == ts.last_epoch
    run(topt, kopt, [ts], [ks], steps=6)


def test_warns_when_scheduler_steps_before_optimizer():
    _, kopt = optimizers()
    ks = ksched.StepLR(kopt, 2)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        ks.step()
    _, kopt = optimizers()
    ks = ksched.StepLR(kopt, 2)
    kopt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ks.step()
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        ks.get_lr()


@pytest.mark.parametrize(
    "make",
    [
        lambda m, o: m.LinearLR(o, start_factor=0),
        lambda m, o: m.LinearLR(o, start_factor=1.5),
        lambda m, o: m.LinearLR(o, end_factor=-0.1),
        lambda m, o: m.OneCycleLR(o, max_lr=1.0),
        lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=0),
        lambda m, o: m.OneCycleLR(o, max_lr=1.0, epochs=0, steps_per_epoch=3),
        lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=10, pct_start=1.5),
        lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=10, anneal_strategy="exp"),
        lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=10),
        lambda m, o: m.LambdaLR(o, [lambda e: 1.0, lambda e: 2.0]),
        lambda m, o: m.SequentialLR(o, [], milestones=[]),
        lambda m, o: m.SequentialLR(o, [m.StepLR(o, 2), m.StepLR(o, 3)], milestones=[]),
    ],
)
def test_errors_match_torch(make):
    topt, kopt = optimizers()
    with pytest.raises(ValueError) as t_err:
        make(tsched, topt)
    with pytest.raises(ValueError) as k_err:
        make(ksched, kopt)
    assert str(k_err.value) == str(t_err.value)


def test_one_cycle_past_total_steps_raises():
    topt, kopt = optimizers()
    ts = tsched.OneCycleLR(topt, max_lr=1.0, total_steps=3)
    ks = ksched.OneCycleLR(kopt, max_lr=1.0, total_steps=3)
    run(topt, kopt, [ts], [ks], steps=3)
    with pytest.raises(ValueError) as t_err:
        ts.step()
    with pytest.raises(ValueError) as k_err:
        ks.step()
    assert str(k_err.value) == str(t_err.value)


def test_scheduler_needs_an_optimizer():
    with pytest.raises(TypeError, match="object is not an Optimizer"):
        ksched.StepLR(object(), 2)
