"""The less common kiln.optim.lr_scheduler schedules (ReduceLROnPlateau, CosineAnnealingWarm-
Restarts, PolynomialLR, ConstantLR, MultiplicativeLR, ChainedScheduler, CyclicLR) run side by
side with torch's on matching optimizers: lr (and momentum) sequences compared exactly, step
with explicit (fractional) epochs, state dicts and resuming, tensor lrs, warnings and errors.
"""

import warnings

import numpy as np
import pytest
import torch
import torch.optim.lr_scheduler as tsched
from optim_util import kiln_param, torch_param

import kiln
import kiln.optim as koptim
import kiln.optim.lr_scheduler as ksched

STEPS = 60


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


class Factor:
    """A callable object: its state (unlike a lambda's) is saved in scheduler state dicts."""

    def __init__(self, value):
        self.value = value

    def __call__(self, x):
        return self.value**x if x < 5 else self.value


SCHEDULES = [
    ("MultiplicativeLR", {"lr_lambda": lambda e: 0.95}),
    ("MultiplicativeLR", {"lr_lambda": lambda e: 0.9 if e % 7 == 0 else 1.01}),
    ("ConstantLR", {}),
    ("ConstantLR", {"factor": 0.3, "total_iters": 12}),
    ("ConstantLR", {"factor": 1.0, "total_iters": 3}),
    ("PolynomialLR", {}),
    ("PolynomialLR", {"total_iters": 25, "power": 0.9}),
    ("PolynomialLR", {"total_iters": 40, "power": 2.0}),
    ("CosineAnnealingWarmRestarts", {"T_0": 7}),
    ("CosineAnnealingWarmRestarts", {"T_0": 3, "T_mult": 2, "eta_min": 1e-3}),
    ("CosineAnnealingWarmRestarts", {"T_0": 1, "T_mult": 3, "eta_min": 5}),
    ("CyclicLR", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4}),
    (
        "CyclicLR",
        {
            "base_lr": [0.01, 0.02],
            "max_lr": [0.1, 0.3],
            "step_size_up": 3,
            "step_size_down": 7,
            "mode": "triangular2",
        },
    ),
    ("CyclicLR", {"base_lr": 1e-3, "max_lr": 0.05, "step_size_up": 5, "mode": "exp_range"}),
    (
        "CyclicLR",
        {"base_lr": 1e-3, "max_lr": 0.05, "step_size_up": 6, "mode": "exp_range", "gamma": 0.97},
    ),
    (
        "CyclicLR",
        {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4, "scale_fn": lambda c: 1.0 / c},
    ),
    (
        "CyclicLR",
        {
            "base_lr": 0.01,
            "max_lr": 0.1,
            "step_size_up": 4,
            "scale_fn": lambda i: 0.99**i,
            "scale_mode": "iterations",
            "base_momentum": [0.7, 0.75],
            "max_momentum": 0.95,
        },
    ),
    ("CyclicLR", {"base_lr": 0.02, "max_lr": 0.2, "step_size_up": 9, "cycle_momentum": False}),
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
    cycles = name == "CyclicLR" and kwargs.get("cycle_momentum", True)
    momentum_key = "momentum" if opt_name == "SGD" else "betas"
    keys = ("lr", "initial_lr") + (
        (momentum_key, "base_momentum", "max_momentum") if cycles else ()
    )
    for key in keys:
        assert group_values(kopt, key) == group_values(topt, key), key
    run(topt, kopt, [ts], [ks], keys=keys)
    assert ks.last_epoch == ts.last_epoch
    assert ks.state_dict() == ts.state_dict()


def test_multiplicative_per_group_lambdas():
    topt, kopt = optimizers(lrs=(0.1, 0.2))
    lambdas = [lambda e: 0.97, Factor(0.9)]
    ts, ks = tsched.MultiplicativeLR(topt, lambdas), ksched.MultiplicativeLR(kopt, lambdas)
    run(topt, kopt, [ts], [ks])


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("ConstantLR", {"factor": 0.25, "total_iters": 6}),
        ("PolynomialLR", {"total_iters": 10, "power": 1.5}),
        ("MultiplicativeLR", {"lr_lambda": lambda e: 0.9}),
        ("CyclicLR", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4}),
    ],
)
def test_step_with_epoch(name, kwargs):
    """ConstantLR and PolynomialLR jump by their closed forms; the others have none, so
    (as in torch) they evaluate the recursive form at the given epoch."""
    topt, kopt = optimizers(momentum=0.9)
    ts, ks = getattr(tsched, name)(topt, **kwargs), getattr(ksched, name)(kopt, **kwargs)
    topt.step()
    kopt.step()
    for epoch in [3, 7, 1, 6, 6, 12, 25, 2]:
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step\\(\\)`"):
            ks.step(epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts.step(epoch)
        assert ks.get_last_lr() == ts.get_last_lr()
        assert group_values(kopt, "momentum") == group_values(topt, "momentum")


@pytest.mark.parametrize("t_0,t_mult", [(5, 1), (3, 2), (2, 3)])
def test_warm_restarts_fractional_epochs(t_0, t_mult):
    """Per-batch stepping with ``epoch + i / iters``, then interleaved explicit and implicit
    steps; an explicit epoch is supported here, so no deprecation warning."""
    topt, kopt = optimizers(lrs=(0.1, 0.07))
    kwargs = {"T_0": t_0, "T_mult": t_mult, "eta_min": 1e-4}
    ts = tsched.CosineAnnealingWarmRestarts(topt, **kwargs)
    ks = ksched.CosineAnnealingWarmRestarts(kopt, **kwargs)
    iters = 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for epoch in range(20):
            for i in range(iters):
                topt.step()
                kopt.step()
                ts.step(epoch + i / iters)
                ks.step(epoch + i / iters)
                assert ks.get_last_lr() == ts.get_last_lr()
                assert (ks.T_cur, ks.T_i, ks.last_epoch) == (ts.T_cur, ts.T_i, ts.last_epoch)
        for epoch in [None, 26, None, None, 3.5, None, 0, 100.25, None]:
            ts.step(epoch)
            ks.step(epoch)
            assert ks.get_last_lr() == ts.get_last_lr()
            assert ks.state_dict() == ts.state_dict()


def test_warm_restarts_resume_from_last_epoch():
    topt, kopt = optimizers()
    for opt in (topt, kopt):
        opt.param_groups[0]["initial_lr"] = 0.3
    kwargs = {"T_0": 4, "T_mult": 2, "last_epoch": 9}
    ts = tsched.CosineAnnealingWarmRestarts(topt, **kwargs)
    ks = ksched.CosineAnnealingWarmRestarts(kopt, **kwargs)
    assert ks.state_dict() == ts.state_dict()
    run(topt, kopt, [ts], [ks], steps=20)


def test_warm_restarts_negative_epoch_raises():
    topt, kopt = optimizers()
    ts = tsched.CosineAnnealingWarmRestarts(topt, T_0=3)
    ks = ksched.CosineAnnealingWarmRestarts(kopt, T_0=3)
    with pytest.raises(ValueError) as t_err:
        ts.step(-1)
    with pytest.raises(ValueError) as k_err:
        ks.step(-1)
    assert str(k_err.value) == str(t_err.value)


def metric_sequence(seed=0):
    """Improves, stalls with noise, improves again, then stays flat: enough plateaus to
    trigger several reductions for every patience used below."""
    rng = np.random.default_rng(seed)
    parts = [
        np.linspace(1.0, 0.5, 8),
        0.5 + 0.01 * rng.standard_normal(25),
        np.linspace(0.5, 0.2, 10),
        np.full(20, 0.2),
        0.2 - 0.0001 * np.arange(15),
    ]
    return [float(x) for x in np.concatenate(parts)]


PLATEAU_CONFIGS = [
    {},
    {"patience": 0},
    {"patience": 2, "factor": 0.5},
    {"patience": 1, "cooldown": 3, "factor": 0.5},
    {"patience": 2, "threshold": 0.05, "threshold_mode": "abs"},
    {"patience": 1, "factor": 0.5, "min_lr": 0.002},
    {"patience": 1, "factor": 0.5, "min_lr": [0.01, 0.0005]},
    {"patience": 0, "factor": 0.5, "eps": 0.01},
    {"mode": "max", "patience": 2, "factor": 0.3},
    {"mode": "max", "patience": 1, "threshold": 0.02, "threshold_mode": "abs", "cooldown": 1},
]


@pytest.mark.parametrize("kwargs", PLATEAU_CONFIGS)
@pytest.mark.parametrize("as_tensor", [False, True])
def test_plateau_matches_torch(kwargs, as_tensor):
    topt, kopt = optimizers(lrs=(0.1, 0.03), momentum=0.9)
    ts = tsched.ReduceLROnPlateau(topt, **kwargs)
    ks = ksched.ReduceLROnPlateau(kopt, **kwargs)
    assert isinstance(ks, ksched.LRScheduler)
    assert ks.get_last_lr() == ts.get_last_lr() == [0.1, 0.03]
    assert ks.state_dict() == ts.state_dict()
    metrics = metric_sequence()
    if kwargs.get("mode") == "max":
        metrics = [1.0 - m for m in metrics]
    reductions = 0
    for m in metrics:
        topt.step()
        kopt.step()
        before = group_values(kopt, "lr")
        if as_tensor:
            ts.step(torch.tensor(m, dtype=torch.float32))
            ks.step(kiln.tensor(m, dtype=kiln.float32))
        else:
            ts.step(m)
            ks.step(m)
        reductions += group_values(kopt, "lr") != before
        assert ks.get_last_lr() == ts.get_last_lr()
        assert group_values(kopt, "lr") == group_values(topt, "lr")
        assert ks.state_dict() == ts.state_dict()
    assert reductions > 0


def test_plateau_tensor_lr():
    """A 0-d tensor lr is filled in place (the optimizer keeps the same tensor) and
    get_last_lr returns copies, as in torch."""
    zeros = np.zeros(3, np.float32)
    topt = torch.optim.Adam([torch_param(zeros)], lr=torch.tensor(0.1))
    kopt = koptim.Adam([kiln_param(zeros)], lr=kiln.tensor(0.1))
    ts = tsched.ReduceLROnPlateau(topt, patience=0, factor=0.5)
    ks = ksched.ReduceLROnPlateau(kopt, patience=0, factor=0.5)
    lr_tensor = kopt.param_groups[0]["lr"]
    for m in [1.0, 2.0, 3.0, 0.5, 0.6, 0.7]:
        ts.step(m)
        ks.step(m)
        (klr,), (tlr,) = ks.get_last_lr(), ts.get_last_lr()
        assert isinstance(klr, kiln.Tensor) and klr is not lr_tensor
        assert float(klr) == float(tlr)
    assert kopt.param_groups[0]["lr"] is lr_tensor
    assert float(lr_tensor) == float(topt.param_groups[0]["lr"])


def test_plateau_state_dict_resume():
    kwargs = {"patience": 2, "cooldown": 1, "factor": 0.5, "min_lr": [0.001, 0.0001]}
    topt, kopt = optimizers(lrs=(0.1, 0.03))
    ts, ks = tsched.ReduceLROnPlateau(topt, **kwargs), ksched.ReduceLROnPlateau(kopt, **kwargs)
    metrics = metric_sequence(1)
    for m in metrics[:30]:
        ts.step(m)
        ks.step(m)
    ksd = ks.state_dict()
    assert ksd == ts.state_dict()
    _, kopt2 = optimizers(lrs=(0.1, 0.03))
    ks2 = ksched.ReduceLROnPlateau(kopt2, mode="max")
    kopt2.load_state_dict(kopt.state_dict())
    ks2.load_state_dict(ksd)
    assert ks2.mode == "min" and ks2.mode_worse == float("inf")
    for m in metrics[30:]:
        ts.step(m)
        ks2.step(m)
        assert ks2.get_last_lr() == ts.get_last_lr()
        assert ks2.state_dict() == ts.state_dict()


def test_plateau_step_with_epoch_warns():
    topt, kopt = optimizers()
    ts = tsched.ReduceLROnPlateau(topt, patience=0)
    ks = ksched.ReduceLROnPlateau(kopt, patience=0)
    for epoch, m in [(5, 1.0), (9, 2.0), (2, 3.0)]:
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step\\(\\)`"):
            ks.step(m, epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts.step(m, epoch)
        assert ks.last_epoch == ts.last_epoch == epoch
        assert ks.get_last_lr() == ts.get_last_lr()


def test_plateau_new_param_group():
    """A scalar min_lr stretches to a group added later; a per-group list cannot."""
    for min_lr, error in [(0.001, None), ([0.001], RuntimeError)]:
        topt, kopt = optimizers()
        ts = tsched.ReduceLROnPlateau(topt, patience=0, min_lr=min_lr)
        ks = ksched.ReduceLROnPlateau(kopt, patience=0, min_lr=min_lr)
        topt.add_param_group({"params": [torch_param(np.zeros(2, np.float32))], "lr": 0.5})
        kopt.add_param_group({"params": [kiln_param(np.zeros(2, np.float32))], "lr": 0.5})
        ts.step(1.0)
        ks.step(1.0)
        if error is None:
            ts.step(2.0)
            ks.step(2.0)
            assert ks.get_last_lr() == ts.get_last_lr()
            assert ks.min_lrs == ts.min_lrs == [0.001, 0.001]
            continue
        with pytest.raises(error) as t_err:
            ts.step(2.0)
        with pytest.raises(error) as k_err:
            ks.step(2.0)
        assert str(k_err.value) == str(t_err.value)


@pytest.mark.parametrize("pass_optimizer", [False, True])
def test_chained_scheduler(pass_optimizer):
    def make(mod, opt):
        scheds = [
            mod.ConstantLR(opt, factor=0.1, total_iters=20),
            mod.ExponentialLR(opt, gamma=0.9),
            mod.PolynomialLR(opt, total_iters=50, power=0.5),
        ]
        return mod.ChainedScheduler(scheds, optimizer=opt if pass_optimizer else None)

    topt, kopt = optimizers(lrs=(0.1, 0.05), momentum=0.9)
    ts, ks = make(tsched, topt), make(ksched, kopt)
    assert ks.get_last_lr() == ts.get_last_lr()
    run(topt, kopt, [ts], [ks])
    assert ks.state_dict() == ts.state_dict()


def test_chained_scheduler_with_cyclic_and_nested():
    def make(mod, opt):
        inner = mod.ChainedScheduler(
            [mod.MultiplicativeLR(opt, lambda e: 0.99), mod.ConstantLR(opt, 0.5, 7)]
        )
        cyc = mod.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=5)
        return mod.ChainedScheduler([cyc, inner])

    topt, kopt = optimizers("Adam", lrs=(0.1,))
    ts, ks = make(tsched, topt), make(ksched, kopt)
    assert ks.get_last_lr() == ts.get_last_lr()
    run(topt, kopt, [ts], [ks], keys=("lr", "betas"))


def resume_check(mod_make, opt_name, opt_kwargs, steps_before, keys):
    """Runs both for ``steps_before`` steps, compares state dicts, then resumes kiln from
    them into fresh objects (scheduler built before the optimizer loads, as torch advises)
    and checks it keeps following torch."""
    topt, kopt = optimizers(opt_name, lrs=(0.1, 0.04), **opt_kwargs)
    ts, ks = mod_make(tsched, topt), mod_make(ksched, kopt)
    run(topt, kopt, [ts], [ks], steps=steps_before, keys=keys)
    ksd = ks.state_dict()
    assert ksd == ts.state_dict()
    _, kopt2 = optimizers(opt_name, lrs=(0.1, 0.04), **opt_kwargs)
    ks2 = mod_make(ksched, kopt2)
    kopt2.load_state_dict(kopt.state_dict())
    ks2.load_state_dict(ksd)
    run(topt, kopt2, [ts], [ks2], steps=STEPS - steps_before, keys=keys)
    return ks2


RESUMABLE = [
    ("MultiplicativeLR", lambda m, o: m.MultiplicativeLR(o, lambda e: 0.96)),
    ("ConstantLR", lambda m, o: m.ConstantLR(o, factor=0.2, total_iters=15)),
    ("PolynomialLR", lambda m, o: m.PolynomialLR(o, total_iters=30, power=1.3)),
    ("WarmRestarts", lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2)),
    ("CyclicLR", lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=6, mode="triangular2")),
    ("CyclicExp", lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=6, mode="exp_range")),
    (
        "Chained",
        lambda m, o: m.ChainedScheduler([m.ConstantLR(o, 0.5, 9), m.ExponentialLR(o, 0.95)]),
    ),
]


@pytest.mark.parametrize("make", [m for _, m in RESUMABLE], ids=[n for n, _ in RESUMABLE])
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_state_dict_matches_torch_and_resumes(make, opt_name):
    opt_kwargs = {"momentum": 0.9} if opt_name == "SGD" else {}
    keys = ("lr", "momentum" if opt_name == "SGD" else "betas")
    resume_check(make, opt_name, opt_kwargs, 13, keys)


def test_callable_objects_state_restored():
    """Callable objects (not lambdas) save their ``__dict__``; loading restores it into the
    resumed scheduler's own objects."""

    def make(mod, opt):
        return mod.ChainedScheduler(
            [
                mod.MultiplicativeLR(opt, [Factor(0.9), Factor(0.8)]),
                mod.CyclicLR(opt, 0.01, 0.1, step_size_up=3, scale_fn=Factor(0.7)),
            ]
        )

    topt, kopt = optimizers(lrs=(0.1, 0.04), momentum=0.9)
    ts, ks = make(tsched, topt), make(ksched, kopt)
    run(topt, kopt, [ts], [ks], steps=10, keys=("lr", "momentum"))
    tsd, ksd = ts.state_dict(), ks.state_dict()
    assert ksd == tsd
    assert ksd["_schedulers"][0]["lr_lambdas"] == [{"value": 0.9}, {"value": 0.8}]
    assert ksd["_schedulers"][1]["_scale_fn_custom"] == {"value": 0.7}
    _, kopt2 = optimizers(lrs=(0.1, 0.04), momentum=0.9)
    ks2 = make(ksched, kopt2)
    mult, cyc = ks2._schedulers
    for fn in [*mult.lr_lambdas, cyc._scale_fn_custom]:
        fn.value = 0.1
    kopt2.load_state_dict(kopt.state_dict())
    ks2.load_state_dict(ksd)
    assert [fn.value for fn in mult.lr_lambdas] == [0.9, 0.8]
    assert cyc._scale_fn_custom.value == 0.7
    # The dict is left intact, so it can be loaded again.
    assert ksd == tsd
    run(topt, kopt2, [ts], [ks2], steps=20, keys=("lr", "momentum"))


def test_get_lr_outside_step_warns_and_step_order():
    for make in [
        lambda o: ksched.MultiplicativeLR(o, lambda e: 0.9),
        lambda o: ksched.ConstantLR(o),
        lambda o: ksched.PolynomialLR(o),
        lambda o: ksched.CosineAnnealingWarmRestarts(o, T_0=3),
        lambda o: ksched.CyclicLR(o, 0.01, 0.1),
    ]:
        _, kopt = optimizers(momentum=0.9)
        ks = make(kopt)
        with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
            ks.get_lr()
    _, kopt = optimizers()
    ks = ksched.PolynomialLR(kopt)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        ks.step()


def assert_same_error(make, exc_type, topt, kopt):
    with pytest.raises(exc_type) as t_err:
        make(tsched, topt)
    with pytest.raises(exc_type) as k_err:
        make(ksched, kopt)
    assert str(k_err.value) == str(t_err.value)


@pytest.mark.parametrize(
    "make",
    [
        lambda m, o: m.ConstantLR(o, factor=1.5),
        lambda m, o: m.ConstantLR(o, factor=-0.1),
        lambda m, o: m.MultiplicativeLR(o, [lambda e: 1.0, lambda e: 2.0]),
        lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=0),
        lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=2.5),
        lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=0),
        lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=1.5),
        lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, eta_min="0.1"),
        lambda m, o: m.CyclicLR(o, 0.01, 0.1, mode="cosine"),
        lambda m, o: m.CyclicLR(o, [0.01, 0.02], 0.1),
        lambda m, o: m.CyclicLR(o, 0.01, [0.1, 0.2]),
        lambda m, o: m.CyclicLR(o, 0.01, 0.1, base_momentum=[0.8, 0.8]),
        lambda m, o: m.ReduceLROnPlateau(o, factor=1.0),
        lambda m, o: m.ReduceLROnPlateau(o, mode="median"),
        lambda m, o: m.ReduceLROnPlateau(o, threshold_mode="pct"),
        lambda m, o: m.ReduceLROnPlateau(o, min_lr=[0.1, 0.2]),
        lambda m, o: m.ChainedScheduler([]),
        lambda m, o: m.ChainedScheduler([m.ReduceLROnPlateau(o)]),
        lambda m, o: m.ChainedScheduler([m.StepLR(o, 2), m.ReduceLROnPlateau(o)]),
    ],
)
def test_value_errors_match_torch(make):
    topt, kopt = optimizers(momentum=0.9)
    assert_same_error(make, ValueError, topt, kopt)


def test_cyclic_needs_momentum_to_cycle():
    topt, kopt = optimizers("Adagrad")
    assert_same_error(lambda m, o: m.CyclicLR(o, 0.01, 0.1), ValueError, topt, kopt)
    ts = tsched.CyclicLR(topt, 0.01, 0.1, step_size_up=3, cycle_momentum=False)
    ks = ksched.CyclicLR(kopt, 0.01, 0.1, step_size_up=3, cycle_momentum=False)
    run(topt, kopt, [ts], [ks], steps=10)


def test_type_errors_match_torch():
    topt, kopt = optimizers()
    assert_same_error(lambda m, o: m.MultiplicativeLR(o, 0.9), TypeError, topt, kopt)
    assert_same_error(lambda m, o: m.ChainedScheduler([object()], o), TypeError, topt, kopt)
    for name in ("ReduceLROnPlateau", "CyclicLR"):
        args = (0.01, 0.1) if name == "CyclicLR" else ()
        with pytest.raises(TypeError, match="object is not an Optimizer"):
            getattr(ksched, name)(object(), *args)


def test_chained_requires_one_optimizer():
    topt, kopt = optimizers()
    topt2, kopt2 = optimizers()

    def make(mod, opt):
        other = topt2 if mod is tsched else kopt2
        return mod.ChainedScheduler([mod.StepLR(opt, 2), mod.StepLR(other, 3)])

    with pytest.raises(ValueError, match="expects all schedulers to belong to the same"):
        make(tsched, topt)
    with pytest.raises(ValueError, match="expects all schedulers to belong to the same"):
        make(ksched, kopt)
