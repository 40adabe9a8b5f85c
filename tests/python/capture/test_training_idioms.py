"""Idioms of training scripts around the model under kiln.compile: gradient clipping compiles,
runs once and returns the norm before clipping, packed sequences pass through compiled code, a
global optimizer's scheduled learning rate does not recompile every step, module iteration
methods are captured, and compiled modules and functions called from compiled code are captured
in place."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
from kiln._capture.backend_compiled import CpuBackend
from kiln.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def test_clip_grad_norm_in_compiled_code_clips_once():
    w = kiln.ones(4, requires_grad=True)
    w.grad = kiln.full((4,), 10.0)
    norm = kiln.compile(lambda ps: nn.utils.clip_grad_norm_(ps, 1.0))([w])
    assert norm.item() == 20.0  # before clipping, as eager returns it
    np.testing.assert_allclose(w.grad.numpy(), np.full(4, 0.5), rtol=1e-6)

    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    net(kiln.randn(5, 4)).pow(2).sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    explained = kiln.explain(lambda m: nn.utils.clip_grad_norm_(m.parameters(), 0.1))(net)
    total = math.sqrt(sum(float((g * g).sum()) for g in grads))
    np.testing.assert_allclose(explained.result.item(), total, rtol=1e-6)
    # the gradients are graph inputs and their in-place scaling is written back: no break
    assert explained.graph_break_count == 0 and explained.fallbacks == [[]]
    for p, g in zip(net.parameters(), grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), (g * 0.1 / total).numpy(), rtol=1e-5)


def test_packed_sequences_pass_through_compiled_code():
    kiln.manual_seed(0)
    lstm = nn.LSTM(4, 6, batch_first=True)
    x, lengths = kiln.randn(3, 5, 4), kiln.tensor([5, 3, 2])

    def fn(x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, _) = lstm(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return padded.sum() + h.sum()

    np.testing.assert_allclose(kiln.compile(fn)(x, lengths).item(), fn(x, lengths).item(),
                               rtol=1e-6)
    packed = pack_padded_sequence(x, lengths, batch_first=True)
    explained = kiln.explain(lambda p: pad_packed_sequence(p, batch_first=True)[0] * 2)(packed)
    np.testing.assert_array_equal(explained.result.numpy(),
                                  (pad_packed_sequence(packed, batch_first=True)[0] * 2).numpy())
    # one graph, no break: the unpacking itself runs as an eager node (its sizes are data)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


_net = nn.Linear(4, 3)
_opt = kiln.optim.AdamW(_net.parameters(), lr=1e-2)
_sched = kiln.optim.lr_scheduler.StepLR(_opt, 1, gamma=0.5)


def _global_step():
    _opt.step()


def test_a_global_optimizers_scheduled_rate_recompiles_once():
    explained = kiln.explain(_global_step)
    x = kiln.randn(8, 4)
    for _ in range(6):
        _opt.zero_grad()
        _net(x).sum().backward()
        report = explained()
        _sched.step()
    assert len(report.captures) == 2 and len(report.recompiles) == 1  # then lr is an input


def test_module_iteration_is_captured():
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    x = kiln.randn(5, 4)

    def fn(x):  # L2 regularisation, a dtype probe, a module count
        reg = sum(p.pow(2).sum() for p in net.parameters())
        names = [n for n, _ in net.named_parameters()]
        count = len(list(net.modules())) + len(names)
        return net(x).to(next(net.parameters()).dtype).sum() + reg * count

    explained = kiln.explain(fn)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    assert explained.fallbacks == [[]]
    np.testing.assert_allclose(explained.result.item(), fn(x).item(), rtol=1e-6)


def test_compiled_callables_called_from_compiled_code_are_captured_there():
    net = nn.Linear(4, 3)
    compiled_net = kiln.compile(net)
    compiled_fn = kiln.compile(lambda t: t.sin() * 2)
    x = kiln.randn(5, 4)

    def fn(x):
        return compiled_net(x).sum() + compiled_fn(x).sum()

    explained = kiln.explain(fn)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    # float32 sums of about 35 terms of size 1 that cancel: the GEMM kernel's order (which
    # differs between CPUs) moves the last bits, so the bound is absolute.
    np.testing.assert_allclose(explained.result.item(), fn(x).item(), rtol=1e-6, atol=1e-5)


def test_the_compile_apis_scripts_reach_for():
    import kiln._dynamo

    net = nn.Linear(3, 2)
    x = kiln.randn(4, 3)
    want = net(x)
    net.compile()
    explained = kiln.explain(lambda t: net(t).sum())(x)  # the parent captures the module itself
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    np.testing.assert_allclose(net(x).detach().numpy(), want.detach().numpy(), rtol=1e-6)
    assert kiln.compiler.is_compiling() is False
    scaled = kiln.compile(lambda t: t * (2 if kiln.compiler.is_compiling() else 3))
    assert scaled(kiln.ones(1)).item() == 2.0
    kiln.set_float32_matmul_precision("high")
    assert kiln.get_float32_matmul_precision() == "high"
    kiln.set_float32_matmul_precision("highest")
    with pytest.raises(RuntimeError, match="Invalid precision"):
        kiln.set_float32_matmul_precision("fast")
    kiln._dynamo.config.cache_size_limit = 2  # read by kiln.compile as its recompile limit
    try:
        fn = kiln.compile(lambda t: t + 1, dynamic=False)
        with pytest.warns(UserWarning, match=r"recompile limit \(2\)"):
            for n in range(2, 6):
                np.testing.assert_array_equal(fn(kiln.ones(n)).numpy(), np.full(n, 2.0))
    finally:
        kiln._dynamo.config.cache_size_limit = 8
    kiln._dynamo.reset()


def test_channels_last_layout():
    x = kiln.randn(2, 3, 4, 5)
    y = x.to(memory_format=kiln.channels_last)
    assert y.stride() == (60, 1, 15, 3) and bool((y == x).all())
    assert y.is_contiguous(memory_format=kiln.channels_last) and not y.is_contiguous()
    assert x.contiguous(memory_format=kiln.channels_last).stride() == y.stride()
    conv = nn.Conv2d(3, 4, 3).to(memory_format=kiln.channels_last)
    assert conv.weight.is_contiguous(memory_format=kiln.channels_last)
    assert isinstance(conv.weight, nn.Parameter) and conv.weight.requires_grad
    backend = CpuBackend(fallback=False)
    np.testing.assert_allclose(kiln.compile(conv, backend=backend)(y).detach().numpy(),
                               conv(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert backend.reports[0].eager_nodes == 0 and len(backend.reports[0].parts) == 1
    v = kiln.randn(1, 2, 3, 4, 5).to(memory_format=kiln.channels_last_3d)
    assert v.is_contiguous(memory_format=kiln.channels_last_3d)
    with pytest.raises(RuntimeError, match="required rank 4"):
        kiln.randn(3, 4).to(memory_format=kiln.channels_last)


def test_module_hooks_run_inside_the_graph():
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    net[0].register_forward_hook(lambda mod, inp, out: out * 2)
    net[2].register_forward_pre_hook(lambda mod, inp: (inp[0] + 1,))
    x = kiln.randn(5, 4)
    explained = kiln.explain(net)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    np.testing.assert_allclose(explained.result.detach().numpy(), net(x).detach().numpy(),
                               rtol=1e-6)
    seen = {}  # a hook that records an activation: its store runs eagerly, once per call
    net[1].register_forward_hook(lambda mod, inp, out: seen.__setitem__("relu", out.detach()))
    got = kiln.compile(net)(x)
    np.testing.assert_allclose(got.detach().numpy(), net(x).detach().numpy(), rtol=1e-6)
    assert seen["relu"].shape == (5, 3)


def test_a_gan_step_compiled_whole():
    """A GAN step: the discriminator's backward, then the generator's through the same
    generated batch. The generated batch and the discriminator's loss come from one compiled
    part with one backward node, which the first backward frees (as torch.compile's does): the
    second backward raises torch's error with its retain_graph hint, and with
    retain_graph=True the step equals eager."""
    kiln.manual_seed(3)
    gen, disc = nn.Linear(4, 6), nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
    opt_g = kiln.optim.SGD(gen.parameters(), lr=0.1)
    opt_d = kiln.optim.SGD(disc.parameters(), lr=0.1)
    bce = nn.BCELoss()

    def step(z, real, retain):
        fake = gen(z)
        d_loss = bce(disc(real), kiln.ones(8, 1)) + bce(disc(fake.detach()), kiln.zeros(8, 1))
        opt_d.zero_grad()
        d_loss.backward(retain_graph=retain)
        opt_d.step()
        g_loss = bce(disc(fake), kiln.ones(8, 1))
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        return d_loss.detach(), g_loss.detach()

    z, real = kiln.randn(8, 4), kiln.randn(8, 6)
    state = copy.deepcopy((gen.state_dict(), disc.state_dict()))
    want = [step(z, real, False) for _ in range(3)]
    gen.load_state_dict(state[0])
    disc.load_state_dict(state[1])
    opt_g.state.clear()
    opt_d.state.clear()
    backend = CpuBackend()
    compiled = kiln.compile(step, backend=backend)
    got = [compiled(z, real, True) for _ in range(3)]
    # everything compiles: the losses (binary_cross_entropy), and the generator's forward
    # after the discriminator's in-place update, whose gradient reaches the updated leaves
    assert sum(len(r.parts) for r in backend.reports) == 3
    assert sum(r.backward_parts for r in backend.reports) == 2
    assert [r.fallbacks for r in backend.reports if r.fallbacks] == []
    assert sum(r.eager_nodes for r in backend.reports) == 0
    for (gd, gg), (wd, wg) in zip(got, want, strict=True):
        np.testing.assert_allclose(gd.item(), wd.item(), rtol=1e-5)
        np.testing.assert_allclose(gg.item(), wg.item(), rtol=1e-5)
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        compiled(z, real, False)


def test_a_forward_after_an_in_place_update_of_a_leaf_trains_compiled():
    """An update under no_grad leaves a parameter the same leaf: the loss computed from the
    updated value differentiates into the parameter's .grad, in one compiled training part."""
    w_ref = kiln.randn(4, 3).requires_grad_()
    w = w_ref.detach().clone().requires_grad_()
    x = kiln.randn(5, 4)
    w_ref.grad = kiln.randn(4, 3)
    w.grad = w_ref.grad.clone()

    def step(w, x):
        early = w.sum() * 2
        with kiln.no_grad():
            w.sub_(0.1 * w.grad)
        return early + (x @ w).tanh().sum()

    backend = CpuBackend()
    compiled = kiln.compile(step, backend=backend)
    for fn, param in ((step, w_ref), (compiled, w)):
        loss = fn(param, x)
        loss.backward()
    np.testing.assert_allclose(w.detach().numpy(), w_ref.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), w_ref.grad.numpy(), rtol=1e-5, atol=1e-6)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.backward_parts == 1, report.fallbacks


def test_a_backward_that_needs_a_value_from_before_its_update_raises_as_eager():
    """w * w saves w itself; updating w in place afterwards is eager autograd's error, and the
    compiled part, which cannot keep the old value, runs eagerly and raises it too."""

    def step(w):
        early = (w * w).sum()
        with kiln.no_grad():
            w.add_(1.0)
        return early + w.sum()

    for fn in (step, kiln.compile(step, backend=CpuBackend())):
        w = kiln.ones(3, requires_grad=True)
        loss = fn(w)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


def test_a_second_backward_through_the_same_output_raises_as_eager():
    w = kiln.randn(3, requires_grad=True)

    def fn(x):
        y = (x * w).sin().sum()
        y.backward()
        y.backward()

    with pytest.raises(RuntimeError, match="retain_graph=True"):
        kiln.compile(fn)(kiln.randn(3))


def test_module_iteration_follows_a_reassigned_parameter():
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    backend = CpuBackend(fallback=False)
    fn = kiln.compile(lambda: sum(p.sum() for p in net.parameters()), backend=backend)
    fn()
    net[0].weight = nn.Parameter(kiln.full((2, 2), 10.0))
    np.testing.assert_allclose(fn().item(), sum(p.sum() for p in net.parameters()).item(),
                               rtol=1e-6)
    assert len(backend.reports) == 2 and all(r.eager_nodes == 0 for r in backend.reports)


def test_a_tensor_filled_with_a_run_time_number():
    """A diffusion sampler's `full((B,), t)` with a step number that changes between calls:
    one compiled program for every t."""
    backend = CpuBackend(fallback=False)

    def fn(x, t):
        return x * kiln.full((x.shape[0],), t, dtype=kiln.float32) + kiln.full((2,), t + 1)

    compiled = kiln.compile(fn, backend=backend)
    x = kiln.randn(2)
    for t in (3, 7, 11):
        np.testing.assert_allclose(compiled(x, t).numpy(), fn(x, t).numpy(), rtol=1e-6)
        assert compiled(x, t).dtype == fn(x, t).dtype
    assert len(backend.reports) == 2  # the first t, then t as a run-time number
    assert all(r.eager_nodes == 0 for r in backend.reports)


def test_model_train_and_eval_inside_compiled_code():
    net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    x = kiln.randn(4, 3)

    def step(x):
        net.train()  # already training: nothing to do, no break
        return net(x).sum()

    explained = kiln.explain(step)(x)
    assert explained.graph_break_count == 0
    net.eval()

    def evaluate(x):
        net.eval()
        return net(x).sum()

    explained = kiln.explain(evaluate)(x)
    assert explained.graph_break_count == 0
    np.testing.assert_allclose(explained.result.item(), net(x).sum().item(), rtol=1e-6)
    explained = kiln.explain(step)(x)  # a change of mode runs eagerly at a break
    (reason,) = explained.break_reasons
    assert "changes the modules' mode" in reason.reason and net.training


def test_grad_scaler_steps_once_in_compiled_code():
    """scaler.step/update read the gradients for infs: each runs eagerly at a break, once
    (before, the call ran once as a capture example and again at the break); scale() is
    captured as a multiply."""
    results = []
    for compiled in (False, True):
        w = nn.Parameter(kiln.zeros(2))
        opt = kiln.optim.SGD([w], lr=1.0)
        scaler = kiln.amp.GradScaler("cpu", init_scale=1.0, growth_interval=1)

        def step(x):
            opt.zero_grad()
            scaler.scale((w * x).sum()).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()

        run = kiln.compile(step) if compiled else step
        for _ in range(3):
            run(kiln.ones(2))
        results.append((w.detach().numpy().copy(), scaler.get_scale()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert results[0][1] == results[1][1] == 8.0

    scaler = kiln.amp.GradScaler("cpu", init_scale=4.0)
    explained = kiln.explain(lambda x: scaler.scale(x.sum()))(kiln.ones(3))
    assert explained.graph_break_count == 0 and explained.fallbacks == [[]]


def test_requires_grad_inside_compiled_code_then_autograd_grad():
    """x.requires_grad_() on a value computed in compiled code, then autograd.grad(out, x): the
    saliency / gradient-penalty idiom. The compiled part after it differentiates x."""
    kiln.manual_seed(0)
    critic = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def saliency(a, b):
        x = 0.5 * a + 0.5 * b
        x.requires_grad_(True)
        out = critic(x).sum()
        return kiln.autograd.grad(out, x)[0].abs().sum()

    a, b = kiln.randn(4, 3), kiln.randn(4, 3)
    backend = CpuBackend()
    got = kiln.compile(saliency, backend=backend)(a, b)
    np.testing.assert_allclose(got.item(), saliency(a, b).item(), rtol=1e-6)
    (report,) = backend.reports
    assert report.backward_parts == 1
    # what stays eager: the flag itself and autograd.grad (and the getitem of its tuple)
    assert sorted(t.rsplit(".", 1)[-1] for _, t, _ in report.fallbacks) == [
        "getitem", "grad", "requires_grad_"], report.fallbacks
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        kiln.compile(lambda n: n.requires_grad_())(kiln.arange(3))


def test_a_write_of_a_value_that_requires_grad_into_a_plain_tensor_trains():
    """zeros, an eager node (torch.where(mask)), then index_add_ of a layer's output into the
    zeros: eager autograd gives that tensor its history, so the part that writes it runs
    eagerly (with the reason) and the layer gets its gradient (a mixture-of-experts layer)."""
    kiln.manual_seed(0)
    lin = nn.Linear(4, 4)

    def moe(h):
        out = kiln.zeros(16, 4)
        (top_x,) = kiln.where(h[:, 0] > 0)
        out.index_add_(0, top_x, lin(h[top_x]))
        return out

    h = kiln.randn(16, 4)
    grads = []
    backend = CpuBackend()
    for fn in (moe, kiln.compile(moe, backend=backend)):
        lin.zero_grad()
        out = fn(h)
        assert out.requires_grad
        (out * kiln.arange(4.0)).sum().backward()
        grads.append(lin.weight.grad.clone())
    np.testing.assert_allclose(grads[1].numpy(), grads[0].numpy(), rtol=1e-6)
    reasons = [why for r in backend.reports for _, _, why in r.fallbacks]
    assert any("in-place write into" in why for why in reasons), reasons


def test_a_frame_without_tensor_work_runs_as_python_after_two_captures():
    """HF's linear warmup: scheduler.step() inside a compiled step calls `lr_lambda(step)` with
    a new int every step. A frame that computes no tensor runs as plain Python after its second
    capture instead of capturing again for each step; the compiled function itself never does."""
    from corpus_util import compiler_of

    net = nn.Linear(3, 1)
    opt = kiln.optim.SGD(net.parameters(), lr=0.1)

    def warmup(step):
        return min(1.0, (step + 1) / 4) * max(0.0, (20 - step) / 20)

    sched = kiln.optim.lr_scheduler.LambdaLR(opt, warmup)

    def step(x):
        loss = net(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        return loss

    compiled = kiln.compile(step)
    records: list = []
    compiler_of(compiled).recorder = records
    lrs = []
    for _ in range(12):
        compiled(kiln.ones(2, 3))
        lrs.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(lrs, [0.1 * warmup(k + 1) for k in range(12)], rtol=1e-12)
    assert sum(r.code.co_name == "warmup" for r in records) <= 2
