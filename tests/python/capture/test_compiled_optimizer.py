"""optimizer.step() inside compiled code is captured and compiled (optimizer_step.py): SGD, Adam
and AdamW update every parameter in the compiled program, equal to the eager step; a scheduler's
learning rate becomes a graph input after its first change; what is not captured breaks the
graph with the reason."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
from kiln._capture.backend_compiled import CpuBackend

X = np.random.default_rng(0).normal(size=(32, 8)).astype(np.float32)
Y = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)


def model():
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def train(make_opt, compiled, steps=5, scheduler=False, backend=None):
    """Steps of a small regression; the optimizer step compiled or not. Returns the parameters
    and the optimizer."""
    net = model()
    opt = make_opt(net.parameters())
    sched = kiln.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7) if scheduler else None

    def step(opt):
        opt.step()

    run = kiln.compile(step, backend=backend) if compiled else step
    x, y = kiln.from_numpy(X), kiln.from_numpy(Y)
    for _ in range(steps):
        opt.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        run(opt)
        if sched is not None:
            sched.step()
    return [p.detach().numpy().copy() for p in net.parameters()], opt


OPTIMIZERS = {
    "adamw": lambda p: kiln.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "adam_l2_maximize": lambda p: kiln.optim.Adam(p, lr=1e-2, weight_decay=0.01, maximize=True),
    "adam_betas": lambda p: kiln.optim.Adam(p, lr=3e-3, betas=(0.8, 0.95), eps=1e-6),
    "adam_amsgrad": lambda p: kiln.optim.Adam(p, lr=1e-2, amsgrad=True),
    "adamw_amsgrad": lambda p: kiln.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "sgd": lambda p: kiln.optim.SGD(p, lr=0.1),
    "sgd_nesterov": lambda p: kiln.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                             weight_decay=1e-3),
    "sgd_dampening": lambda p: kiln.optim.SGD(p, lr=0.05, momentum=0.5, dampening=0.2),
    "rmsprop": lambda p: kiln.optim.RMSprop(p, lr=1e-2),
    "rmsprop_centered_momentum": lambda p: kiln.optim.RMSprop(p, lr=1e-2, momentum=0.9,
                                                              centered=True, weight_decay=1e-3),
    "adagrad": lambda p: kiln.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=1e-3),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("scheduler", [False, True])
def test_step_compiles_and_equals_eager(name, scheduler):
    make = OPTIMIZERS[name]
    want, eager_opt = train(make, False, scheduler=scheduler)
    backend = CpuBackend(fallback=False)
    got, opt = train(make, True, scheduler=scheduler, backend=backend)
    # centered RMSprop takes the root of a difference of near-equal averages: rounding differs
    # more there between the fused group kernel and the compiled ops
    tol = 1e-3 if "centered" in name else 2e-5
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=tol, atol=1e-6)
    compiled = [r for r in backend.reports if r.parts]
    # one capture, a second when the scheduler first changes the rate (then a graph input);
    # SGD with momentum and dampening: its first step (creating the buffers) runs eagerly
    assert 1 <= len(compiled) <= (2 if scheduler else 1), [len(r.parts) for r in backend.reports]
    for report in compiled:
        assert report.eager_nodes == 0 and len(report.parts) == 1
    for p, q in zip(opt.state.values(), eager_opt.state.values(), strict=True):
        for key, value in q.items():
            np.testing.assert_allclose(p[key].numpy(), value.numpy(), rtol=tol, atol=1e-6)


def test_a_whole_training_step_in_one_compiled_function():
    net = model()
    opt = kiln.optim.AdamW(net.parameters(), lr=1e-2)
    ref_net = model()
    ref_opt = kiln.optim.AdamW(ref_net.parameters(), lr=1e-2)

    def train_step(net, opt, x, y):
        opt.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    compiled = kiln.compile(train_step, backend=CpuBackend(fallback=False))
    x, y = kiln.from_numpy(X), kiln.from_numpy(Y)
    for _ in range(4):
        got = compiled(net, opt, x, y)
        want = train_step(ref_net, ref_opt, x, y)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    for p, q in zip(net.parameters(), ref_net.parameters(), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-5, atol=1e-6)
    # backward() breaks the graph (as in torch.compile); the step after it is one graph
    explained = kiln.explain(train_step)(net, opt, x, y)
    updates = [(ops, fb) for ops, fb in zip(explained.ops_per_graph, explained.fallbacks,
                                            strict=True) if "kiln.Tensor.lerp_" in ops]
    assert len(updates) == 1 and updates[0][1] == []
    assert not any("step" in r.reason for r in explained.break_reasons)


def test_optimizer_graph_has_no_eager_node_and_names_the_update():
    net = model()
    opt = kiln.optim.Adam(net.parameters(), lr=1e-3)
    ((net(kiln.from_numpy(X)) - kiln.from_numpy(Y)) ** 2).mean().backward()

    def step(opt):
        opt.step()

    explained = kiln.explain(step)(opt)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert explained.fallbacks == [[]]
    ops = explained.ops_per_graph[0]
    assert ops.count("kiln.Tensor.lerp_") == 4 and ops.count("kiln.Tensor.addcmul_") == 4


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_first_step_compiles(nesterov):
    """The momentum buffer starts as zeros at capture: the first compiled step equals eager's
    first step (which copies the gradient), so no step runs eagerly."""
    nets = [model(), model()]
    opts = [kiln.optim.SGD(n.parameters(), lr=0.1, momentum=0.9, nesterov=nesterov)
            for n in nets]  # fmt: skip

    def step(opt):
        opt.step()

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(step, backend=backend)
    x, y = kiln.from_numpy(X), kiln.from_numpy(Y)
    for _ in range(3):
        for net, opt, run in zip(nets, opts, (compiled, step), strict=True):
            opt.zero_grad()
            ((net(x) - y) ** 2).mean().backward()
            run(opt)
    assert [len(r.parts) for r in backend.reports] == [1]
    for p, q in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6,
                                   atol=1e-7)
        np.testing.assert_allclose(opts[0].state[p]["momentum_buffer"].numpy(),
                                   opts[1].state[q]["momentum_buffer"].numpy(), rtol=1e-6,
                                   atol=1e-7)


def test_sgd_dampening_first_step_runs_eagerly_with_the_reason():
    net = model()
    opt = kiln.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, dampening=0.1)
    ((net(kiln.from_numpy(X)) - kiln.from_numpy(Y)) ** 2).mean().backward()

    def step(opt):
        opt.step()

    explained = kiln.explain(step)(opt)
    assert any("dampening" in r.reason for r in explained.break_reasons)


@pytest.mark.parametrize("case", ["closure", "adamax", "hook"])
def test_what_is_not_captured_breaks_with_the_reason(case):
    net = model()
    if case == "adamax":
        opt = kiln.optim.Adamax(net.parameters())
    else:
        opt = kiln.optim.SGD(net.parameters(), lr=0.1)
    if case == "hook":
        opt.register_step_pre_hook(lambda *a: None)
    ((net(kiln.from_numpy(X)) - kiln.from_numpy(Y)) ** 2).mean().backward()
    before = [p.detach().clone() for p in net.parameters()]

    def step(opt):
        if case == "closure":
            opt.step(lambda: None)
        else:
            opt.step()

    explained = kiln.explain(step)(opt)
    (reason,) = explained.break_reasons
    words = {"closure": "closure", "adamax": "Adamax", "hook": "hooks"}
    assert words[case] in reason.reason
    assert any((p != b).any() for p, b in zip(net.parameters(), before, strict=True))


def test_load_state_dict_and_new_gradients_recompile_and_stay_right():
    make = OPTIMIZERS["adamw"]
    net, ref = model(), model()
    opt, ref_opt = make(net.parameters()), make(ref.parameters())

    def step(opt):
        opt.step()

    compiled = kiln.compile(step)
    x, y = kiln.from_numpy(X), kiln.from_numpy(Y)
    net[0].weight.requires_grad_(False)  # a frozen layer: no gradient, no update
    ref[0].weight.requires_grad_(False)
    for k in range(6):
        if k == 3:  # unfrozen: its gradient appears; a checkpoint's state replaces the tensors
            for m in (net, ref):
                m[0].weight.requires_grad_(True)
            opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))  # torch shares otherwise
        for m, o, run in ((net, opt, compiled), (ref, ref_opt, step)):
            o.zero_grad()
            ((m(x) - y) ** 2).mean().backward()
            run(o)
        for p, q in zip(net.parameters(), ref.parameters(), strict=True):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-5,
                                       atol=1e-6)


def test_a_scheduler_step_inside_the_compiled_step_runs_eagerly_with_its_reason():
    results = []
    for compiled in (False, True):
        kiln.manual_seed(0)
        w = kiln.nn.Parameter(kiln.ones(4))
        opt = kiln.optim.SGD([w], lr=0.1, momentum=0.9)
        sched = kiln.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)

        def step(x, w=w, opt=opt, sched=sched):
            loss = (w * x).sum() ** 2
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            return loss

        fn = step
        if compiled:
            fn = kiln.compile(step)
            records: list = []
            fn._kiln_compiler.recorder = records
        for i in range(6):
            fn(kiln.full((4,), 0.1 * (i + 1)))
        results.append((w.detach().numpy().copy(), opt.param_groups[0]["lr"]))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    assert results[1][1] == results[0][1] == 0.1 * 0.5 ** 3
    reasons = [r.break_record.reason for r in records if r.break_record]
    assert any("StepLR.step() is not captured: a learning-rate schedule runs eagerly" in r
               for r in reasons)


@pytest.mark.parametrize("make_opt", [OPTIMIZERS["adamw"], OPTIMIZERS["sgd_nesterov"]],
                         ids=["adamw", "sgd_nesterov"])
def test_the_update_of_many_parameters_is_a_few_launches_not_one_per_parameter(make_opt):
    """The per-parameter updates are independent small loops: the schedule lays them end to end
    in one launch per dependency level ([Note: launches] in passes/schedule/schedule.h), so 24
    parameters of two shapes update in at most three kernels (the step counters' numbers, the
    weights and moments, the biases' last step), not one or three per parameter."""
    kiln.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(24, 24) for _ in range(12)])
    ref = copy.deepcopy(net)
    opts = [make_opt(net.parameters()), make_opt(ref.parameters())]
    x = kiln.from_numpy(np.random.default_rng(2).normal(size=(8, 24)).astype(np.float32))

    def step(opt):
        opt.step()

    compiled = kiln.compile(step)
    for i in range(3):
        for m, opt in zip((net, ref), opts, strict=True):
            opt.zero_grad()
            (m(x) ** 2).mean().backward()
        compiled(opts[0])
        opts[1].step()
        for a, b in zip(net.parameters(), ref.parameters(), strict=True):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4,
                                       atol=1e-5, err_msg=f"step {i}")
    for p in net.parameters():
        p.grad = kiln.randn(*p.shape)
    explained = kiln.explain(step)(opts[0])
    [capture] = [c for c in explained.captures if c.ops]
    [info] = capture.report.infos
    assert explained.fallbacks == [[]]
    assert 1 <= info["kernels"] <= 3, info["kernels"]
