"""The kiln.optim.Optimizer base compared with torch.optim.Optimizer: zero_grad, param groups
(add_param_group, named parameters, required hyperparameters, custom subclasses), step hooks,
closures, import paths, and the errors for invalid arguments and hyperparameters (torch's
messages)."""

import warnings

import numpy as np
import pytest
import torch
from optim_util import kiln_param, make_params, run_steps, set_grads, to_numpy, torch_param
from torch.optim.optimizer import required as torch_required

import kiln
import kiln.optim as koptim


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    tparams, kparams = make_params("float32")
    topt, kopt = torch.optim.SGD(tparams, lr=0.1), koptim.SGD(kparams, lr=0.1)
    set_grads(tparams, kparams, np.random.default_rng(0), skip={2})
    ptrs = [None if p.grad is None else p.grad.data_ptr() for p in kparams]
    topt.zero_grad(set_to_none=set_to_none)
    kopt.zero_grad(set_to_none=set_to_none)
    for kp, tp, ptr in zip(kparams, tparams, ptrs, strict=True):
        assert (kp.grad is None) == (tp.grad is None)
        if tp.grad is not None:
            assert kp.grad.data_ptr() == ptr  # zeroed in place, not replaced
            np.testing.assert_array_equal(to_numpy(kp.grad), to_numpy(tp.grad))
    kopt.zero_grad()
    assert all(p.grad is None for p in kparams)


def test_updates_are_in_place_and_return_closure_loss():
    _, kparams = make_params("float32")
    opt = koptim.Adam(kparams, lr=0.1)
    ptrs = [p.data_ptr() for p in kparams]
    seen = []

    def closure():
        seen.append(kiln.is_grad_enabled())
        for p in kparams:
            p.grad = kiln.ones(tuple(p.shape))
        return 1.25

    assert opt.step(closure) == 1.25
    assert seen == [True]
    assert [p.data_ptr() for p in kparams] == ptrs
    assert opt.step() is None


def test_add_param_group_and_errors():
    tparams, kparams = make_params("float32")
    kopt = koptim.SGD(kparams[:1], lr=0.1)
    topt = torch.optim.SGD(tparams[:1], lr=0.1)
    kopt.add_param_group({"params": kparams[1], "lr": 0.5})
    topt.add_param_group({"params": tparams[1], "lr": 0.5})
    assert kopt.param_groups[1]["params"] == [kparams[1]]
    assert kopt.state_dict()["param_groups"] == topt.state_dict()["param_groups"]
    cases = [
        (lambda o, ps: o.add_param_group({"params": ps[0]}), ValueError),
        (lambda o, ps: o.add_param_group({"params": {ps[2]}}), TypeError),
        (lambda o, ps: o.add_param_group([ps[2]]), TypeError),
    ]
    for fn, exc in cases:
        with pytest.raises(exc) as t_err:
            fn(topt, tparams)
        with pytest.raises(exc) as k_err:
            fn(kopt, kparams)
        assert str(k_err.value) == str(t_err.value).replace("torch", "kiln")


def test_constructor_errors_match_torch():
    tparams, kparams = make_params("float32")
    for fn, exc in [
        (lambda m, ps: m.SGD([], lr=0.1), ValueError),
        (lambda m, ps: m.SGD([{"params": ps[:2]}, {"params": ps[1:]}], lr=0.1), ValueError),
        (lambda m, ps: m.SGD([ps[0], 3.0], lr=0.1), TypeError),
    ]:
        with pytest.raises(exc) as t_err:
            fn(torch.optim, tparams)
        with pytest.raises(exc) as k_err:
            fn(koptim, kparams)
        assert str(k_err.value) == str(t_err.value)
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        koptim.SGD(kparams[0])


INVALID = [
    ("SGD", {"lr": -1}),
    ("SGD", {"momentum": -0.5}),
    ("SGD", {"weight_decay": -1e-3}),
    ("SGD", {"nesterov": True}),
    ("SGD", {"nesterov": True, "momentum": 0.9, "dampening": 0.1}),
    ("Adam", {"lr": -0.001}),
    ("Adam", {"eps": -1.0}),
    ("Adam", {"betas": (1.0, 0.999)}),
    ("Adam", {"betas": (0.9, -0.1)}),
    ("Adam", {"weight_decay": -0.1}),
    ("Adam", {"betas": (0.9, 1)}),
    ("AdamW", {"lr": -1e-3}),
    ("RMSprop", {"lr": -1}),
    ("RMSprop", {"alpha": -0.1}),
    ("RMSprop", {"eps": -1e-8}),
    ("RMSprop", {"momentum": -1}),
    ("RMSprop", {"weight_decay": -2}),
    ("Adagrad", {"lr": -1}),
    ("Adagrad", {"lr_decay": -1}),
    ("Adagrad", {"weight_decay": -1}),
    ("Adagrad", {"initial_accumulator_value": -1}),
    ("Adagrad", {"eps": -1}),
]


@pytest.mark.parametrize("name,kwargs", INVALID, ids=[f"{n}-{kw}" for n, kw in INVALID])
def test_invalid_hyperparameters_raise_torchs_error(name, kwargs):
    with pytest.raises(ValueError) as t_err:
        getattr(torch.optim, name)([torch_param(np.zeros(2, np.float32))], **kwargs)
    with pytest.raises(ValueError) as k_err:
        getattr(koptim, name)([kiln_param(np.zeros(2, np.float32))], **kwargs)
    assert str(k_err.value) == str(t_err.value)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adagrad"])
def test_fused_with_foreach_or_differentiable_raises(name):
    for kwargs in ({"fused": True, "foreach": True}, {"fused": True, "differentiable": True}):
        with pytest.raises(RuntimeError) as t_err:
            getattr(torch.optim, name)([torch_param(np.zeros(2, np.float32))], **kwargs)
        with pytest.raises(RuntimeError) as k_err:
            getattr(koptim, name)([kiln_param(np.zeros(2, np.float32))], **kwargs)
        assert str(k_err.value) == str(t_err.value)


def test_named_parameters_and_defaults():
    tparams, kparams = make_params("float32")
    topt = torch.optim.Adam([(f"p{i}", p) for i, p in enumerate(tparams)])
    kopt = koptim.Adam([(f"p{i}", p) for i, p in enumerate(kparams)])
    assert kopt.state_dict()["param_groups"] == topt.state_dict()["param_groups"]
    assert kopt.defaults == topt.defaults
    assert repr(kopt) == repr(topt)


def test_step_hooks_run_around_step():
    _, kparams = make_params("float32")
    opt = koptim.SGD(kparams, lr=0.1)
    calls = []
    pre = opt.register_step_pre_hook(lambda o, a, k: calls.append(("pre", o is opt)))
    post = opt.register_step_post_hook(lambda o, a, k: calls.append(("post", o is opt)))
    glob = koptim.optimizer.register_optimizer_step_pre_hook(lambda o, a, k: calls.append("g"))
    opt.step()
    assert calls == ["g", ("pre", True), ("post", True)]
    for h in (pre, post, glob):
        h.remove()
    opt.step()
    assert len(calls) == 3


def test_no_warnings_during_steps():
    tparams, kparams = make_params("float32")
    kopt = koptim.AdamW(kparams, lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        set_grads(tparams, kparams, np.random.default_rng(0))
        kopt.step()


def test_import_paths():
    import subprocess
    import sys

    code = "import kiln; print(kiln.optim.AdamW.__module__, kiln.nn.utils.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["kiln.optim.adam", "kiln.nn.utils"]
    assert koptim.lr_scheduler.StepLR.__module__ == "kiln.optim.lr_scheduler"
    assert issubclass(koptim.lr_scheduler._LRScheduler, koptim.lr_scheduler.LRScheduler)


def _plain_optimizer(fw, optim, required):
    """The same minimal Optimizer subclass written against torch and kiln."""

    class Plain(optim.Optimizer):
        def __init__(self, params, lr=required):
            super().__init__(params, {"lr": lr})

        def step(self, closure=None):
            with fw.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.add_(p.grad, alpha=-group["lr"])
                            self.state[p]["n"] = self.state[p].get("n", 0) + 1

    return Plain


def test_custom_subclass_and_required_hyperparameter():
    tparams, kparams = make_params("float64")
    t_cls = _plain_optimizer(torch, torch.optim, torch_required)
    k_cls = _plain_optimizer(kiln, koptim, koptim.optimizer.required)
    with pytest.raises(ValueError) as t_err:
        t_cls(tparams)
    with pytest.raises(ValueError) as k_err:
        k_cls(kparams)
    assert str(k_err.value) == str(t_err.value)
    topt = t_cls([{"params": tparams[:1], "lr": 0.5}, {"params": tparams[1:], "lr": 0.1}])
    kopt = k_cls([{"params": kparams[:1], "lr": 0.5}, {"params": kparams[1:], "lr": 0.1}])
    run_steps(topt, kopt, tparams, kparams, np.random.default_rng(0), steps=3)
    assert kopt.state_dict() == topt.state_dict()
