"""Compiled training: a captured graph whose inputs require grad compiles a forward and a
backward graph (the joint graph of passes/autodiff, split), recorded as one autograd node.
Gradients equal eager autograd's, the parts run with no eager node, and what has no compiled
derivative still trains correctly on the eager kernels."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import BackendCompilerFailed, CpuBackend


def close(a, b, tol=1e-5):
    assert a.shape == b.shape, (a.shape, b.shape)
    assert kiln.allclose(a, b, rtol=tol, atol=tol), (a - b).abs().max().item()


def grads_as_eager(model_or_fn, make_inputs, params, *, steps=1, strict=True, seed=0, tol=1e-5):
    """Runs fn eagerly and compiled from the same values; checks outputs and the gradients of
    `params` (and of inputs that require grad). Returns the backend."""
    backend = CpuBackend(fallback=not strict)
    compiled = kiln.compile(model_or_fn, backend=backend)
    for step in range(steps):
        inputs = make_inputs(step)
        results = []
        for fn in (model_or_fn, compiled):
            for p in params:
                p.grad = None
            args = [a.detach().clone().requires_grad_(a.requires_grad) for a in inputs]
            kiln.manual_seed(seed + step)
            out = fn(*args)
            loss = out if out.dim() == 0 else (out * out).sum()
            loss.backward()
            grads = [p.grad.clone() for p in params]
            grads += [a.grad.clone() for a in args if a.requires_grad]
            results.append((out.detach(), grads))
        (ref, ref_grads), (got, got_grads) = results
        close(got, ref, tol)
        assert len(ref_grads) == len(got_grads)
        for r, g in zip(ref_grads, got_grads, strict=True):
            close(g, r, tol)
    return backend


def trained_in_one_part(backend):
    report = backend.reports[0]
    assert report.eager_nodes == 0 and report.fallbacks == [], (report.eager, report.fallbacks)
    assert len(report.parts) == 1 and report.backward_parts == 1
    info = report.infos[0]
    assert info["backward"]["kernels"] >= 1 and info["saved"] >= 1
    return report


class MLP(nn.Module):
    def __init__(self, d=16, h=32, classes=5):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def test_mlp_loss_trains_in_one_compiled_part():
    kiln.manual_seed(0)
    model = MLP()
    target = kiln.randint(0, 5, (8,))

    def step(x):
        return F.cross_entropy(model(x), target)

    backend = grads_as_eager(step, lambda s: [kiln.randn(8, 16)], list(model.parameters()),
                             steps=3)
    trained_in_one_part(backend)
    assert len(backend.reports) == 1, "one compile serves every step"


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "tanh", "sigmoid", "silu", "leaky_relu",
                                 "elu", "softplus", "hardtanh", "exp", "sqrt_abs", "clamp"])
def test_pointwise_chain_gradients(act):
    fns = {
        "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "tanh": kiln.tanh, "sigmoid": kiln.sigmoid, "silu": F.silu,
        "leaky_relu": lambda t: F.leaky_relu(t, 0.2), "elu": F.elu, "softplus": F.softplus,
        "hardtanh": F.hardtanh, "exp": kiln.exp, "sqrt_abs": lambda t: (t.abs() + 0.1).sqrt(),
        "clamp": lambda t: t.clamp(-0.5, 0.7),
    }
    w = kiln.randn(6, 7).requires_grad_()

    def fn(x):
        return (fns[act](x * w + 1.0) / 3.0 - x).sum(-1)

    backend = grads_as_eager(fn, lambda s: [kiln.randn(6, 7).requires_grad_()], [w])
    trained_in_one_part(backend)


def test_broadcast_views_and_reductions():
    w = kiln.randn(4, 1, 5).requires_grad_()
    b = kiln.randn(5).requires_grad_()

    def fn(x):
        y = (x.view(3, 4, 5).permute(1, 0, 2) * w + b).transpose(0, 1)
        z = y[:, :, 1:3].mean(dim=(0, 2), keepdim=True) + y.amax(-1, keepdim=True)
        return kiln.cat([z.reshape(-1), y.select(2, 4).flatten()]).softmax(0)

    backend = grads_as_eager(fn, lambda s: [kiln.randn(12, 5).requires_grad_()], [w, b])
    trained_in_one_part(backend)


class Block(nn.Module):
    """A nanoGPT-style block: layer norm, causal attention by masked_fill, a GELU MLP."""

    def __init__(self, d=16, heads=2, t=8, p=0.0):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)
        self.register_buffer("mask", kiln.tril(kiln.ones(t, t)).view(1, 1, t, t))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


@pytest.mark.parametrize("p", [0.0, 0.2])
def test_transformer_block_gradients(p):
    kiln.manual_seed(1)
    block = Block(p=p)
    block.train()
    backend = grads_as_eager(block, lambda s: [kiln.randn(2, 8, 16)], list(block.parameters()),
                             steps=2, tol=2e-5)
    report = backend.reports[0]
    assert report.backward_parts >= 1 and report.eager_nodes == 0
    assert report.fallbacks == [], report.fallbacks
    assert all(info["backward"]["kernels"] >= 1 for info in report.infos if "backward" in info)


def test_embedding_and_head_with_ignore_index():
    kiln.manual_seed(2)
    emb = nn.Embedding(11, 8)
    head = nn.Linear(8, 11, bias=False)
    idx = kiln.randint(0, 11, (3, 5))
    targets = kiln.randint(0, 11, (3, 5))
    targets[0, 1] = -1

    def fn(x):
        logits = head(emb(idx) + x)
        return F.cross_entropy(logits.view(-1, 11), targets.view(-1), ignore_index=-1,
                               label_smoothing=0.1)

    backend = grads_as_eager(fn, lambda s: [kiln.randn(3, 5, 8)],
                             [emb.weight, head.weight])
    trained_in_one_part(backend)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_class_weights(smoothing, reduction):
    kiln.manual_seed(4)
    head = nn.Linear(6, 7)
    weight = kiln.rand(7) + 0.5
    targets = kiln.randint(0, 7, (10,))
    targets[3] = -100

    def fn(x):
        return F.cross_entropy(head(x), targets, weight=weight, reduction=reduction,
                               label_smoothing=smoothing)

    backend = grads_as_eager(fn, lambda s: [kiln.randn(10, 6)], [head.weight, head.bias])
    trained_in_one_part(backend)


def test_cross_entropy_weights_that_require_grad_raise_as_eager():
    weight = (kiln.rand(5) + 0.5).requires_grad_(True)
    targets = kiln.randint(0, 5, (8,))

    def fn(x):
        return F.cross_entropy(x * 2, targets, weight=weight)

    x = kiln.randn(8, 5).requires_grad_(True)
    with pytest.raises(RuntimeError, match="not differentiable with respect to argument 'weight'"):
        kiln.compile(fn)(x)


def test_graph_break_chains_compiled_backwards():
    w1 = kiln.randn(5, 5).requires_grad_()
    w2 = kiln.randn(5, 5).requires_grad_()

    def fn(x):
        h = (x @ w1).tanh()
        if h.sum() > -1e9:  # a branch on data: a graph break
            h = h * 2
        return (h @ w2).sigmoid().sum()

    backend = grads_as_eager(fn, lambda s: [kiln.randn(3, 5)], [w1, w2])
    trained = [r for r in backend.reports if r.backward_parts]
    assert len(trained) == 2, backend.reports
    assert all(r.eager_nodes == 0 for r in trained)


def test_no_grad_call_keeps_an_inference_graph():
    w = kiln.randn(4, 4).requires_grad_()
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(lambda x: (x @ w).relu().sum(), backend=backend)
    x = kiln.randn(3, 4)
    with kiln.no_grad():
        out = compiled(x)
    assert not out.requires_grad
    assert backend.reports[-1].backward_parts == 0
    loss = compiled(x)
    loss.backward()
    assert backend.reports[-1].backward_parts == 1 and len(backend.reports) == 2
    close(out, loss.detach())
    expected = w.grad.clone()
    w.grad = None
    (x @ w).relu().sum().backward()
    close(expected, w.grad)


def test_an_op_without_compiled_derivative_trains_eagerly():
    w = kiln.randn(4, 6).requires_grad_()

    def fn(x):  # output_padding past the stride (under the dilation): no compiled derivative
        y = F.conv_transpose2d((x * w).reshape(1, 1, 4, 6), kiln.ones(1, 1, 2, 2), dilation=3,
                               output_padding=1)
        return y.sum()

    backend = grads_as_eager(fn, lambda s: [kiln.randn(4, 6)], [w], strict=False)
    report = backend.reports[0]
    assert report.backward_parts == 0 and report.eager_nodes > 0
    assert any("output_padding" in reason for _, _, reason in report.fallbacks), (
        report.fallbacks)
    with pytest.raises(BackendCompilerFailed, match="output_padding"):
        kiln.compiler.reset()
        kiln.compile(fn, backend=CpuBackend(fallback=False))(kiln.randn(4, 6))


def test_double_backward_through_compiled_graph_is_refused():
    w = kiln.randn(3, 3).requires_grad_()
    compiled = kiln.compile(lambda x: (x @ w).tanh().sum(), backend=CpuBackend(fallback=False))
    loss = compiled(kiln.randn(2, 3))
    with pytest.raises(RuntimeError, match="create_graph"):
        kiln.autograd.grad(loss, [w], create_graph=True)


def conv_net(width=8):
    """conv-BN-ReLU-pool twice, global average pool, linear head (ResNet's stem pattern)."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
        nn.MaxPool2d(2), nn.Conv2d(width, 2 * width, 3, stride=2, bias=False),
        nn.BatchNorm2d(2 * width), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(2 * width, 10))


def test_conv_batchnorm_pool_net_trains_in_one_part():
    kiln.manual_seed(3)
    net, ref = conv_net(), conv_net()
    ref.load_state_dict(net.state_dict())
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(net, backend=backend)
    target = kiln.randint(0, 10, (4,))
    for _ in range(3):
        x = kiln.randn(4, 3, 16, 16)
        for model, fn in ((ref, ref), (net, compiled)):
            model.zero_grad()
            F.cross_entropy(fn(x), target).backward()
        for p, q in zip(net.parameters(), ref.parameters(), strict=True):
            close(p.grad, q.grad, 2e-5)
        for b, c in zip(net.buffers(), ref.buffers(), strict=True):
            close(b, c)  # running statistics and num_batches_tracked written back once
    (report,) = backend.reports
    assert report.backward_parts == 1 and report.eager_nodes == 0


@pytest.mark.parametrize("pool", ["max", "max_pad", "max_overlap", "avg", "avg_pad", "adaptive",
                                  "avg_ceil", "avg_pad_uncounted", "avg_ceil_uncounted"])
def test_pool_gradients(pool):
    fns = {
        "max": lambda t: F.max_pool2d(t, 2), "max_pad": lambda t: F.max_pool2d(t, 3, 2, 1),
        "max_overlap": lambda t: F.max_pool2d(t, 3, 1), "avg": lambda t: F.avg_pool2d(t, 2),
        "avg_pad": lambda t: F.avg_pool2d(t, 3, 2, 1),
        "adaptive": lambda t: F.adaptive_avg_pool2d(t, (2, 3)),
        # windows that count different numbers of points: ceil_mode's last window, padding
        # left out of the count
        "avg_ceil": lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True),
        "avg_pad_uncounted": lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False),
        "avg_ceil_uncounted": lambda t: F.avg_pool2d(t, (3, 2), 2, 1, ceil_mode=True,
                                                     count_include_pad=False),
    }
    w = kiln.randn(1, 3, 1, 1).requires_grad_()

    def fn(x):
        return fns[pool](F.relu(x * w))  # ties at zero: the first maximum takes the gradient

    backend = grads_as_eager(fn, lambda s: [kiln.randn(2, 3, 8, 6).requires_grad_()], [w])
    trained_in_one_part(backend)


@pytest.mark.parametrize("case", ["plain", "strided_grouped", "dilated"])
def test_conv2d_gradients(case):
    kw = {"plain": {}, "strided_grouped": {"stride": 2, "padding": 1, "groups": 2},
          "dilated": {"dilation": 2, "padding": 2}}[case]
    w = (kiln.randn(4, 4 // kw.get("groups", 1), 3, 3) * 0.3).requires_grad_()
    b = kiln.randn(4).requires_grad_()

    def fn(x):
        return F.conv2d(x, w, b, **kw).tanh()

    backend = grads_as_eager(fn, lambda s: [kiln.randn(2, 4, 9, 7).requires_grad_()], [w, b])
    trained_in_one_part(backend)


def saved_producers(text, needs_grad):
    """The ops whose values the partition saves (inputs as "input"), for a .kir graph."""
    spec = kiln._C._compiler.training_graphs(kiln._C._ir.parse(text), needs_grad)
    return sorted(op for _, _, _, op in spec["saved"]), spec


def test_partition_recomputes_the_pointwise_chain_between_gemms():
    saved, spec = saved_producers("""
graph @mlp(%x: f32[8, 16], %w1: f32[32, 16], %b1: f32[32], %w2: f32[4, 32]) {
  %0 = linear(%x, %w1, %b1) : f32[8, 32]
  %1 = gelu(%0) : f32[8, 32]
  %2 = linear(%1, %w2) : f32[8, 4]
  %3 = tanh(%2) : f32[8, 4]
  return %3
}""", [False, True, True, True])
    # gelu and tanh are recomputed from the GEMMs' outputs: nothing pointwise is saved
    assert saved == ["input", "input", "linear", "linear"], saved
    assert spec["input_grads"] == [1, 2, 3] and spec["grad_outputs"] == [0]


def test_partition_of_softmax_saves_its_input_once():
    saved, _ = saved_producers("""
graph @attn(%q: f32[2, 8, 16], %k: f32[2, 8, 16], %v: f32[2, 8, 16]) {
  %0 = transpose(%k) {dim0 = 1, dim1 = 2} : f32[2, 16, 8] strided [128, 1, 16]
  %1 = matmul(%q, %0) : f32[2, 8, 8]
  %2 = constant() {value = 0.25} : float
  %3 = mul(%1, %2) : f32[2, 8, 8]
  %4 = softmax(%3) {dim = -1} : f32[2, 8, 8]
  %5 = matmul(%4, %v) : f32[2, 8, 16]
  return %5
}""", [True, True, True])
    # the scores (one GEMM's output) are saved; scale and softmax are recomputed from them
    assert saved == ["input", "input", "input", "matmul"], saved


def test_partition_of_layer_norm_saves_nothing_it_can_recompute():
    saved, _ = saved_producers("""
graph @ln(%x: f32[4, 32], %w: f32[32], %b: f32[32]) {
  %0 = layer_norm(%x, %w, %b) {normalized_shape = [32]} : f32[4, 32]
  %1 = relu(%0) : f32[4, 32]
  return %1
}""", [True, True, True])
    assert "relu" not in saved and "input" in saved, saved


@pytest.mark.parametrize("case", ["causal", "bool_mask", "float_mask", "scale", "cross"])
def test_scaled_dot_product_attention_gradients(case):
    wq = (kiln.randn(8, 8) * 0.3).requires_grad_()
    bias = (kiln.randn(5, 7 if case == "cross" else 5) * 0.5).requires_grad_()
    keep = kiln.rand(5, 5) > 0.3
    keep[:, 0] = True  # every row attends somewhere

    def fn(x, kv):
        q = (x @ wq).view(2, 5, 2, 4).transpose(1, 2)
        k = v = kv.view(2, -1, 2, 4).transpose(1, 2)
        if case == "causal":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif case == "bool_mask":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        elif case in ("float_mask", "cross"):
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            y = F.scaled_dot_product_attention(q, k, v, scale=0.3)
        return y.transpose(1, 2).reshape(2, 5, 8)

    s = 7 if case == "cross" else 5
    backend = grads_as_eager(fn, lambda _: [kiln.randn(2, 5, 8).requires_grad_(),
                                            kiln.randn(2, s, 8).requires_grad_()],
                             [wq, bias] if case in ("float_mask", "cross") else [wq])
    trained_in_one_part(backend)


def test_symbolic_sizes_train_compiled_per_shape():
    w = kiln.randn(6, 4).requires_grad_()
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(lambda x: (x @ w).tanh().sum(), backend=backend, dynamic=True)
    for rows in (3, 5, 3, 7):
        x = kiln.randn(rows, 6)
        w.grad = None
        compiled(x).backward()
        got = w.grad.clone()
        w.grad = None
        (x @ w).tanh().sum().backward()
        close(got, w.grad)
    (report,) = backend.reports  # one symbolic capture for every row count
    assert report.fallbacks == [] and report.eager_nodes == 0 and report.eager_calls == 0
    assert report.backward_parts == 1 and report.infos[0]["per_shape"]


def test_rms_norm_with_weight_gradients():
    w = (kiln.rand(16) + 0.5).requires_grad_()
    lin = kiln.randn(16, 16).requires_grad_()

    def fn(x):  # a LLaMA-style pre-norm projection
        return F.silu(F.rms_norm(x, (16,), w, eps=1e-6) @ lin)

    backend = grads_as_eager(fn, lambda _: [kiln.randn(2, 5, 16).requires_grad_()], [w, lin])
    trained_in_one_part(backend)


def test_per_shape_training_types_each_shape_by_its_own_values():
    # interpolate's lowering reads its output size from the example: a part built for another
    # shape must see that shape's example, not the capture's
    w = kiln.randn(1, 3, 1, 1).requires_grad_()

    def fn(x):
        return (F.interpolate(x, scale_factor=2.0, mode="nearest") * w).tanh().sum()

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend, dynamic=True)
    for h, wd in ((4, 4), (5, 6), (8, 8), (5, 6)):
        x = kiln.randn(2, 3, h, wd)
        w.grad = None
        loss = compiled(x)
        loss.backward()
        got_loss, got = loss.item(), w.grad.clone()
        w.grad = None
        want_loss = fn(x)
        want_loss.backward()
        np.testing.assert_allclose(got_loss, want_loss.item(), rtol=1e-5)
        close(got, w.grad)
    assert all(r.eager_calls == 0 for r in backend.reports)


@pytest.mark.parametrize("act", [nn.ReLU(inplace=True), nn.SiLU(inplace=True)],
                         ids=["relu_", "silu_"])
def test_per_shape_training_keeps_an_in_place_activation_of_an_output(act):
    """An in-place activation of a value the part returns (here the model's output, feeding the
    loss): a part built again for a new batch size must return the activation, not the value
    before it (it once returned linear's output for every size after the symbolic capture)."""
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), act)
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(model, backend=backend)
    for rows in (64, 32, 48, 48, 64):
        x = kiln.randn(rows, 5)
        out = compiled(x)
        out.square().sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        want = model(x)
        want.square().sum().backward()
        close(out.detach(), want.detach())
        for g, p in zip(got, model.parameters(), strict=True):
            close(g, p.grad)
        model.zero_grad()
    assert any(info.get("per_shape") for r in backend.reports for info in r.infos)


def test_a_symbolic_int_saved_for_backward():
    w = kiln.randn(5).requires_grad_()

    def fn(x):
        return (x * w).sum() * (x.shape[0] ** 2)

    compiled = kiln.compile(fn, dynamic=True)
    for rows in (3, 4):
        x = kiln.randn(rows, 5)
        w.grad = None
        compiled(x).backward()
        got = w.grad.clone()
        w.grad = None
        fn(x).backward()
        close(got, w.grad)


@pytest.mark.parametrize("case", [dict(), dict(stride=2, padding=1, output_padding=1),
                                  dict(stride=(1, 2, 1), dilation=2, groups=2)], ids=str)
def test_conv_transpose3d_gradients(case):
    kiln.manual_seed(7)
    groups = case.get("groups", 1)
    w = (kiln.randn(4, 6 // groups, 2, 3, 2) * 0.3).requires_grad_()
    b = kiln.randn(6).requires_grad_()

    def fn(x):
        return F.conv_transpose3d(x, w, b, **case).tanh()

    backend = grads_as_eager(fn, lambda s: [kiln.randn(2, 4, 3, 4, 5).requires_grad_()], [w, b],
                             tol=1e-4)
    trained_in_one_part(backend)


def test_copysign_gradients():
    y = kiln.tensor([1.0, -2.0, 0.0, -0.0, 3.0, -1.5])
    w = kiln.tensor([0.5, -1.0, 2.0, 0.0, -3.0, 1.0]).requires_grad_()

    def fn(x):  # the magnitude's gradient: g * sign flip, zero where the magnitude is zero
        return (kiln.copysign(x * w, y) * x).sum()

    backend = grads_as_eager(fn, lambda s: [kiln.randn(6).requires_grad_()], [w])
    trained_in_one_part(backend)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_of_per_position_logits(reduction, smoothing):
    """(N, C, H, W) logits (segmentation) and (N, C, T) ones train compiled."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    for shape in ((2, 5, 3, 4), (3, 4, 6)):
        x = rng.normal(size=shape)
        t = rng.integers(0, shape[1], (shape[0],) + shape[2:])
        t.reshape(-1)[1] = -100
        w = rng.random(shape[1]) + 0.5

        def fn(a, tt, ww, lib):
            return lib.nn.functional.cross_entropy(a * 2, tt, weight=ww, reduction=reduction,
                                                   label_smoothing=smoothing).sum()

        kiln.compiler.reset()
        backend = CpuBackend(fallback=False)
        kx, tx = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        got = kiln.compile(lambda a, tt, ww: fn(a, tt, ww, kiln), backend=backend)(
            kx, kiln.tensor(t), kiln.tensor(w))
        want = fn(tx, torch.tensor(t), torch.tensor(w), torch)
        got.backward()
        want.backward()
        trained_in_one_part(backend)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-10)
        np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)


class TwoHeads(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.skip, self.out = kiln.nn.Linear(4, 4), kiln.nn.Linear(4, 4)

    def forward(self, x):
        return self.out(x) + x, self.skip(x)


def test_a_parameter_reached_only_from_an_unused_output_gets_no_gradient():
    # WaveNet's last block drops its residual output: eager leaves the parameters behind it
    # with grad None (an optimizer skips them); the compiled backward gave them zeros, and
    # weight decay then moved them
    kiln.manual_seed(0)
    model = TwoHeads()
    compiled = kiln.compile(model)
    opt = kiln.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    before = model.out.weight.detach().clone()
    _, skip = compiled(kiln.randn(3, 4))
    skip.sum().backward()
    assert model.out.weight.grad is None and model.out.bias.grad is None
    assert model.skip.weight.grad is not None
    opt.step()
    assert kiln.equal(model.out.weight, before)
    residual, skip = compiled(kiln.randn(3, 4))  # both used: both get gradients
    (residual.sum() + skip.sum()).backward()
    assert model.out.weight.grad is not None


def test_slice_bounds_from_int_arguments_in_a_compiled_backward():
    """CutMix's `x[:, :, y1:y2, x1:x2] = x[index, :, y1:y2, x1:x2]` with a new box per step:
    the bounds are symbols only the int arguments give, so the backward cannot recompute the
    slice from saved tensors (it raised 'no input gives size symbol s0 a value')."""
    w0, x0 = kiln.randn(8, 8), kiln.randn(8, 8)

    def f(x, w, a, b):
        x = x.clone()
        x[:, a:b] = x[:, a + 1:b + 1]
        return (x * w).sum()

    backend = CpuBackend(fallback=False)  # an eager node raises
    compiled = kiln.compile(f, backend=backend)
    for a, b in [(1, 4), (0, 5), (2, 6)]:
        w = w0.clone().requires_grad_()
        compiled(x0, w, a, b).backward()
        got = w.grad.clone()
        w.grad = None
        f(x0, w, a, b).backward()
        close(got, w.grad)
    assert all(r.eager_nodes == 0 and r.backward_parts == 1 for r in backend.reports)


def test_batch_norm_training_with_a_symbolic_batch_compiles():
    """Training-mode BatchNorm2d after the batch went symbolic (a DataLoader's short last
    batch): one compiled node, with the running variance's n / (n - 1) computed per call; it
    ran as an eager node before."""
    kiln.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
    ref = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
    ref.load_state_dict(net.state_dict())
    backend = CpuBackend(fallback=False)  # an eager node raises
    compiled = kiln.compile(net, backend=backend)
    for batch in (8, 5, 3, 8):
        x = kiln.randn(batch, 3, 6, 6)
        out = compiled(x)
        out.square().sum().backward()
        want = ref(x)
        want.square().sum().backward()
        close(out.detach(), want.detach())
    for name in ("running_mean", "running_var"):
        close(getattr(net[1], name), getattr(ref[1], name))
    # gradients summed over four steps in float32, in another order
    np.testing.assert_allclose(net[0].weight.grad.numpy(), ref[0].weight.grad.numpy(),
                               rtol=1e-4, atol=1e-3)
    assert all(r.eager_nodes == 0 for r in backend.reports)


@kiln.compiler.allow_in_graph
def _made_eagerly(x):  # a node the compiler cannot look into: it runs on its eager kernel
    return x * 2 + 1


class _EagerThenInPlace(nn.Module):
    """A value from an eager node updated in place with grad (torchvision's ReLU(inplace=True)
    after a layer kiln runs eagerly, as SyncBatchNorm's collective)."""

    def __init__(self, returns_updated: bool):
        super().__init__()
        self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 3)
        self.act = nn.ReLU(inplace=True)
        self.returns_updated = returns_updated

    def forward(self, x):
        h = _made_eagerly(self.a(x))
        self.act(h)  # h itself is updated
        out = self.b(h)
        return (out, h) if self.returns_updated else out


@pytest.mark.parametrize("returns_updated", [False, True])
def test_an_in_place_update_with_grad_of_an_eager_nodes_result_keeps_a_compiled_backward(
        returns_updated):
    """The part after the eager node updates one of its inputs in place with grad: its forward
    returns the new value and the caller copies it into the input through autograd, so the part
    keeps its compiled backward (it once ran its whole backward eagerly: "an in-place update of
    %t1, which requires grad"), and a returned `h` is the caller's tensor, updated."""
    kiln.manual_seed(0)
    model = _EagerThenInPlace(returns_updated)
    backend = CpuBackend(fallback=True)
    compiled = kiln.compile(model, backend=backend)
    x = kiln.randn(5, 6)
    for _ in range(2):
        results = []
        for fn in (model, compiled):
            model.zero_grad()
            out = fn(x)
            loss = (out[0].square().sum() + out[1].sum()) if returns_updated else out.square().sum()
            loss.backward()
            results.append((out, [p.grad.clone() for p in model.parameters()]))
        (want, want_grads), (got, got_grads) = results
        for w, g in zip(want if returns_updated else [want], got if returns_updated else [got],
                        strict=True):
            close(g.detach(), w.detach())
        if returns_updated:
            assert got[1].min().item() >= 0  # the returned h is the updated tensor
        for w, g in zip(want_grads, got_grads, strict=True):
            close(g, w)
    [report] = backend.reports
    assert [target for _, target, _ in report.fallbacks] == [f"{__name__}._made_eagerly"]
    assert report.backward_parts >= 1
