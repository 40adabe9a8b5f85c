"""Gradients of every differentiable op against torch's on the same inputs.

Each case is one function written against the shared API (``m`` is ``kiln`` or ``torch``), run on
inputs with the same values in both libraries; the output gradient is random, and every input
gradient must match torch's (float64: 1e-10; float32: 1e-5), and in float64 pass gradcheck
(central finite differences). Inputs come contiguous, transposed (non-contiguous) and broadcast
where the op broadcasts.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

F64 = "float64"


def _arrays(shapes, seed, positive=False):
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        a = rng.standard_normal(s)
        if positive:
            a = np.abs(a) + 0.5
        out.append(a)
    return out


def _leaf(lib, a, dtype, transposed):
    t = lib.tensor(a.T.copy() if transposed else a, dtype=getattr(lib, dtype))
    if transposed:
        t = t.t()  # the same values, as a non-contiguous view
        if lib is torch:
            t = t.detach()
    return t.requires_grad_()


def _grads(lib, fn, arrays, dtype, transposed, seed):
    inputs = [_leaf(lib, a, dtype, transposed and a.ndim == 2) for a in arrays]
    out = fn(lib, *inputs)
    outs = out if isinstance(out, tuple) else (out,)
    rng = np.random.default_rng(seed + 1)
    gs = [lib.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in outs]
    values = [o.detach().double().numpy() for o in outs]
    grads = lib.autograd.grad(outs, inputs, gs, allow_unused=True)
    return values, [None if g is None else g.double().numpy() for g in grads]


def check(
    fn, shapes, *, dtype=F64, positive=False, transposed=False, seed=0, tol=None, gradcheck=True
):
    arrays = _arrays(shapes, seed, positive)
    tol = tol or (1e-10 if dtype == F64 else 2e-5)
    kv, kg = _grads(kiln, fn, arrays, dtype, transposed, seed)
    tv, tg = _grads(torch, fn, arrays, dtype, transposed, seed)
    for a, b in zip(kv, tv, strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    for i, (a, b) in enumerate(zip(kg, tg, strict=True)):
        assert (a is None) == (b is None), (
            f"input {i}: kiln grad {a is not None}, torch {b is not None}"
        )
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"grad of input {i}")
    if dtype == F64 and gradcheck:
        _gradcheck(fn, arrays, transposed, [g is not None for g in kg])


def _gradcheck(fn, arrays, transposed, differentiated):
    """kiln's derivative against central finite differences too, on the same inputs (those the
    function differentiates: one it detaches inside has no gradient to check)."""
    inputs = [_leaf(kiln, a, F64, transposed and a.ndim == 2) for a in arrays]
    inputs = [x if d else x.detach() for x, d in zip(inputs, differentiated, strict=True)]
    assert kiln.autograd.gradcheck(lambda *xs: fn(kiln, *xs), inputs)


F = lambda m: m.nn.functional  # noqa: E731

BINARY = {
    "add": lambda m, x, y: x + y,
    "add_alpha": lambda m, x, y: m.add(x, y, alpha=2.5),
    "sub": lambda m, x, y: x - y,
    "rsub_scalar": lambda m, x, y: 3.0 - x * y,
    "mul": lambda m, x, y: x * y,
    "div": lambda m, x, y: x / y,
    "maximum": lambda m, x, y: m.maximum(x, y),
    "minimum": lambda m, x, y: m.minimum(x, y),
    "where": lambda m, x, y: m.where(x > 0, x, y),
    "matmul": lambda m, x, y: x @ y.t(),
    "pow_tensor": lambda m, x, y: x.abs().add(0.5) ** y,
}

UNARY = {
    "neg": lambda m, x: -x,
    "abs": lambda m, x: x.abs(),
    "square": lambda m, x: x.square(),
    "exp": lambda m, x: x.exp(),
    "expm1": lambda m, x: m.expm1(x),
    "sin": lambda m, x: x.sin(),
    "cos": lambda m, x: x.cos(),
    "tanh": lambda m, x: x.tanh(),
    "sigmoid": lambda m, x: x.sigmoid(),
    "erf": lambda m, x: m.erf(x),
    "relu": lambda m, x: m.relu(x),
    "gelu": lambda m, x: F(m).gelu(x),
    "gelu_tanh": lambda m, x: F(m).gelu(x, approximate="tanh"),
    "silu": lambda m, x: F(m).silu(x),
    "softplus": lambda m, x: F(m).softplus(x, beta=2.0, threshold=1.0),
    "leaky_relu": lambda m, x: F(m).leaky_relu(x, 0.2),
    "elu": lambda m, x: F(m).elu(x, 1.5),
    "hardtanh": lambda m, x: F(m).hardtanh(x, -0.5, 0.7),
    "relu6": lambda m, x: F(m).relu6(x * 4),
    "pow_scalar": lambda m, x: x**3,
    "pow_half": lambda m, x: x.abs().add(0.1) ** 0.5,
    "clamp": lambda m, x: x.clamp(-0.5, 0.6),
    "clamp_min": lambda m, x: x.clamp(min=0.1),
    "sum": lambda m, x: x.sum(),
    "sum_dim": lambda m, x: x.sum(1),
    "sum_keepdim": lambda m, x: x.sum(0, keepdim=True),
    "mean": lambda m, x: x.mean(),
    "mean_dims": lambda m, x: x.mean((0, 1)),
    "amax": lambda m, x: x.amax(1),
    "amin_keepdim": lambda m, x: x.amin(0, keepdim=True),
    "max_all": lambda m, x: x.max(),
    "var": lambda m, x: x.var(1),
    "std": lambda m, x: x.std(0, keepdim=True),
    "var_all": lambda m, x: x.var(),
    "logsumexp": lambda m, x: m.logsumexp(x, 1),
    "softmax": lambda m, x: x.softmax(-1),
    "softmax0": lambda m, x: m.softmax(x, 0),
    "log_softmax": lambda m, x: F(m).log_softmax(x, dim=1),
    "masked_fill": lambda m, x: x.masked_fill(x > 0.3, -1.0),
    "tril": lambda m, x: x.tril(),
    "triu_k": lambda m, x: m.triu(x, 1),
    "view": lambda m, x: x.reshape(-1).view(2, -1) * 2,
    "transpose": lambda m, x: x.transpose(0, 1) * m.arange(4.0),
    "permute": lambda m, x: x.unsqueeze(0).permute(2, 0, 1).sum(1) * m.arange(4.0),
    "expand": lambda m, x: x[:, :1].expand(4, 5) * m.arange(5.0),
    "slice": lambda m, x: x[1:3, ::2] * 3,
    "select": lambda m, x: x[2] * x[0],
    "index_list": lambda m, x: x[[0, 2, 2]] * 2,
    "index_tensor": lambda m, x: x[:, m.tensor([2, 0, 2])],
    "narrow_squeeze": lambda m, x: x.narrow(1, 1, 1).squeeze(1),
    "flatten_unflatten": lambda m, x: x.flatten().unflatten(0, (2, 6)),
    "split": lambda m, x: x.split(2, 0)[1] * x.split([1, 2], 1)[1].sum(),
    "chunk": lambda m, x: x.chunk(2, 1)[0] * 2,
    "unbind": lambda m, x: x.unbind(1)[2] * x.unbind(0)[0].sum(),
    "cat": lambda m, x: m.cat([x, x * 2, x[:1]], 0),
    "stack": lambda m, x: m.stack([x, x.exp()], 1),
    "clone_contiguous": lambda m, x: x.t().contiguous().clone() * 2,
    "to_float32": lambda m, x: x.float().double() * 2,
    "gather": lambda m, x: x.gather(1, m.tensor([[0, 2], [1, 1], [2, 0], [0, 0]])),
    "index_select": lambda m, x: x.index_select(0, m.tensor([3, 0, 3])),
    "layer_norm": lambda m, x: F(m).layer_norm(x, (3,)),
    "dropout_eval": lambda m, x: F(m).dropout(x, 0.5, training=False) * 2,
}

TERNARY = {
    "linear": lambda m, x, w, b: F(m).linear(x, w, b),
    "addmm": lambda m, x, w, b: m.addmm(b, x, w.t(), beta=0.5, alpha=2.0),
    "layer_norm_affine": lambda m, x, w, b: F(m).layer_norm(x, (3,), w[0], b[0], 1e-3),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name):
    check(BINARY[name], [(4, 3), (4, 3)])


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "where"])
def test_binary_broadcast(name):
    check(BINARY[name], [(4, 3), (1, 3)])
    check(BINARY[name], [(4, 1), (3,)])


@pytest.mark.parametrize("name", ["add", "mul", "div", "matmul"])
def test_binary_non_contiguous_float32(name):
    check(BINARY[name], [(3, 3), (3, 3)], dtype="float32", transposed=True)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    # A cast through float32 rounds the perturbation away: finite differences can't see it.
    check(UNARY[name], [(4, 3)], gradcheck=name != "to_float32")


@pytest.mark.parametrize("name", ["exp", "tanh", "sum_dim", "softmax", "var", "layer_norm"])
def test_unary_non_contiguous(name):
    check(UNARY[name], [(3, 3)], transposed=True)


def test_log_sqrt_rsqrt_reciprocal_on_positive_inputs():
    for fn in (
        lambda m, x: x.log(),
        lambda m, x: m.log1p(x),
        lambda m, x: x.sqrt(),
        lambda m, x: x.rsqrt(),
        lambda m, x: x.reciprocal(),
    ):
        check(fn, [(4, 3)], positive=True)


@pytest.mark.parametrize("name", sorted(TERNARY))
def test_ternary(name):
    check(
        TERNARY[name],
        [(4, 3), (5, 3), (5,)] if name != "layer_norm_affine" else [(4, 3), (1, 3), (1, 3)],
    )


@pytest.mark.parametrize(
    "shapes",
    [[(3,), (3,)], [(3,), (3, 4)], [(2, 3), (3,)], [(2, 2, 3), (3, 4)], [(5, 2, 3), (1, 3, 2)]],
)
def test_matmul_shapes(shapes):
    check(lambda m, x, y: m.matmul(x, y), shapes)


def test_bmm_and_linear_batched():
    check(lambda m, x, y: m.bmm(x, y), [(2, 3, 4), (2, 4, 5)])
    check(lambda m, x, w, b: F(m).linear(x, w, b), [(2, 3, 4), (5, 4), (5,)])
    check(lambda m, x, w: F(m).linear(x, w), [(4,), (5, 4)])


def test_embedding_with_padding_idx():
    def fn(m, w):
        idx = m.tensor([[0, 2, 2], [1, 3, 0]])
        return F(m).embedding(idx, w, padding_idx=2) * 1.5

    # padding_idx's row gets no gradient by definition, so finite differences disagree there.
    check(fn, [(5, 3)], gradcheck=False)
    check(lambda m, w: F(m).embedding(m.tensor([[0, 2, 2], [1, 3, 0]]), w), [(5, 3)])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(reduction, smoothing):
    def fn(m, x, w):
        target = m.tensor([1, 0, 3, -100, 2])
        return F(m).cross_entropy(
            x,
            target,
            weight=w.detach().abs() + 0.5,
            ignore_index=-100,
            reduction=reduction,
            label_smoothing=smoothing,
        )

    check(fn, [(5, 4), (4,)])


def test_cross_entropy_unweighted_spatial_and_probabilities():
    check(lambda m, x: F(m).cross_entropy(x, m.tensor([[1, 0], [2, 2]])), [(2, 3, 2)])
    check(
        lambda m, x, p: F(m).cross_entropy(x, p.softmax(1), label_smoothing=0.2), [(3, 4), (3, 4)]
    )


def test_nll_and_mse_loss():
    check(lambda m, x: F(m).nll_loss(x.log_softmax(1), m.tensor([0, 2, 1])), [(3, 3)])
    check(lambda m, x, y: F(m).mse_loss(x, y), [(3, 4), (3, 4)])
    check(lambda m, x, y: F(m).mse_loss(x, y, reduction="sum"), [(3, 4), (3, 4)])


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    def fn(m, q, k, v):
        return F(m).scaled_dot_product_attention(q, k, v, is_causal=causal)

    check(fn, [(2, 2, 4, 3), (2, 2, 4, 3), (2, 2, 4, 3)], tol=1e-9)


def test_attention_with_masks():
    def fn(m, q, k, v):
        mask = m.ones(4, 4, dtype=m.bool).tril()
        return F(m).scaled_dot_product_attention(q, k, v, attn_mask=mask)

    check(fn, [(1, 4, 3), (1, 4, 3), (1, 4, 3)], tol=1e-9)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"stride": 2, "padding": 1},
        {"padding": 2, "dilation": 2},
        {"groups": 2, "padding": 1},
        {"padding": "same"},
        {"padding": "valid", "stride": (2, 1)},
    ],
)
def test_conv2d(kwargs):
    def fn(m, x, w, b):
        return F(m).conv2d(x, w, b, **kwargs)

    check(fn, [(2, 4, 7, 6), (6, 4 // kwargs.get("groups", 1), 3, 3), (6,)], tol=1e-9)


def test_conv1d_depthwise_and_even_kernel_same_padding():
    check(lambda m, x, w: F(m).conv1d(x, w, stride=2, padding=1), [(2, 3, 9), (5, 3, 3)])
    check(lambda m, x, w: F(m).conv1d(x, w, groups=3), [(1, 3, 8), (3, 1, 2)])
    check(lambda m, x, w: F(m).conv2d(x, w, padding="same"), [(1, 2, 5, 5), (3, 2, 2, 4)])
    check(lambda m, x, w: F(m).conv2d(x, w), [(2, 5, 5), (3, 2, 3, 3)])  # unbatched


@pytest.mark.parametrize(
    "fn",
    [
        lambda m, x: F(m).max_pool2d(x, 2),
        lambda m, x: F(m).max_pool2d(x, 3, stride=2, padding=1),
        lambda m, x: F(m).max_pool2d(x, 2, ceil_mode=True),
        lambda m, x: F(m).max_pool1d(x.flatten(2), 3),
        lambda m, x: F(m).avg_pool2d(x, 2),
        lambda m, x: F(m).avg_pool2d(x, 3, stride=2, padding=1),
        lambda m, x: F(m).avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False),
        lambda m, x: F(m).avg_pool2d(x, 2, divisor_override=3),
        lambda m, x: F(m).avg_pool1d(x.flatten(2), 4),
        lambda m, x: F(m).adaptive_avg_pool2d(x, 1),
        lambda m, x: F(m).adaptive_avg_pool2d(x, (3, 2)),
        lambda m, x: F(m).adaptive_avg_pool1d(x.flatten(2), 5),
        lambda m, x: F(m).pad(x, (1, 2, 0, 1)) * 2,
    ],
)
def test_pooling(fn):
    check(fn, [(2, 3, 6, 7)])


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(training):
    def fn(m, x, w, b):
        rm, rv = m.zeros(3, dtype=m.float64) + 0.1, m.ones(3, dtype=m.float64) * 1.5
        return F(m).batch_norm(x, rm, rv, w, b, training=training, momentum=0.2, eps=1e-3)

    check(fn, [(4, 3, 2, 5), (3,), (3,)])
    check(lambda m, x: F(m).batch_norm(x, None, None, training=True), [(6, 3)])


MORE_UNARY = {
    "tan": lambda m, x: (x * 0.5).tan(),
    "asin": lambda m, x: (x * 0.3).asin(),
    "acos": lambda m, x: (x * 0.3).acos(),
    "atan": lambda m, x: x.atan(),
    "sinh": lambda m, x: x.sinh(),
    "cosh": lambda m, x: x.cosh(),
    "asinh": lambda m, x: x.asinh(),
    "acosh": lambda m, x: (x.abs() + 1.5).acosh(),
    "atanh": lambda m, x: (x * 0.3).atanh(),
    "exp2": lambda m, x: x.exp2(),
    "log2": lambda m, x: (x.abs() + 0.5).log2(),
    "log10": lambda m, x: (x.abs() + 0.5).log10(),
    "erfc": lambda m, x: m.erfc(x),
    "frac": lambda m, x: (x * 3).frac(),
    "floor_ceil_round_trunc_sign": lambda m, x: (
        x.floor() + x.ceil() + x.round() + x.trunc() + x.sign() + x * 2
    ),
    "nan_to_num": lambda m, x: m.nan_to_num(x.log()),
    "selu": lambda m, x: F(m).selu(x),
    "celu": lambda m, x: F(m).celu(x, 0.7),
    "hardsigmoid": lambda m, x: F(m).hardsigmoid(x * 3),
    "hardswish": lambda m, x: F(m).hardswish(x * 3),
    "mish": lambda m, x: F(m).mish(x),
    "logsigmoid": lambda m, x: F(m).logsigmoid(x),
    "softsign": lambda m, x: F(m).softsign(x),
    "tanhshrink": lambda m, x: F(m).tanhshrink(x),
    "hardshrink": lambda m, x: F(m).hardshrink(x, 0.4),
    "softshrink": lambda m, x: F(m).softshrink(x, 0.4),
    "threshold": lambda m, x: F(m).threshold(x, 0.2, -1.0),
    "cumsum": lambda m, x: x.cumsum(1),
    "cumsum0": lambda m, x: m.cumsum(x, 0),
    "prod_all": lambda m, x: x.prod(),
    "prod_dim": lambda m, x: x.prod(1),
    "prod_with_zero": lambda m, x: (x * (x > 0.2)).prod(0, keepdim=True),
    "norm2": lambda m, x: x.norm(),
    "norm_dim": lambda m, x: x.norm(3.0, dim=1),
    "norm_inf": lambda m, x: x.norm(float("inf")),
    "norm1": lambda m, x: x.norm(1, dim=0, keepdim=True),
    "nansum": lambda m, x: m.nansum(x.log(), 1),
    "sort": lambda m, x: x.sort(1)[0] * m.arange(3.0),
    "sort_desc": lambda m, x: x.sort(0, descending=True).values * m.arange(4.0)[:, None],
    "topk": lambda m, x: x.topk(2, 1)[0].exp(),
    "flip": lambda m, x: x.flip(0, 1) * m.arange(3.0),
    "roll": lambda m, x: x.roll((1, -1), (0, 1)) * m.arange(3.0),
    "repeat": lambda m, x: x.repeat(2, 1, 2) * m.arange(6.0),
    "tile": lambda m, x: x.tile((2,)) * m.arange(6.0),
    "rms_norm": lambda m, x: F(m).rms_norm(x, (3,)),
    "group_norm": lambda m, x: F(m).group_norm(x.reshape(2, 2, 3), 2),
}

MORE_BINARY = {
    "atan2": lambda m, x, y: m.atan2(x, y),
    "hypot": lambda m, x, y: m.hypot(x, y),
    "fmax": lambda m, x, y: m.fmax(x, y),
    "fmin": lambda m, x, y: m.fmin(x, y),
    "fmod": lambda m, x, y: m.fmod(x, y.abs() + 0.3),
    "remainder": lambda m, x, y: m.remainder(x, y.abs() + 0.3),
    "float_power": lambda m, x, y: m.float_power(x.abs() + 0.5, y),
    "lerp": lambda m, x, y: m.lerp(x, y, x.sigmoid()),
    "rms_norm_affine": lambda m, x, w: F(m).rms_norm(x, (3,), w[0], eps=1e-3),
}


# torch computes these derivatives with float32 constants (1/6, 1/alpha): kiln's are exact.
LOOSE = {"hardsigmoid": 1e-7, "celu": 1e-7}


@pytest.mark.parametrize("name", sorted(MORE_UNARY))
def test_more_unary(name):
    check(MORE_UNARY[name], [(4, 3)], tol=LOOSE.get(name))


@pytest.mark.parametrize("name", sorted(MORE_BINARY))
def test_more_binary(name):
    check(MORE_BINARY[name], [(4, 3), (4, 3)])


LOSSES = {
    "l1": lambda m, x, y: F(m).l1_loss(x, y),
    "l1_sum": lambda m, x, y: F(m).l1_loss(x, y, reduction="sum"),
    "smooth_l1": lambda m, x, y: F(m).smooth_l1_loss(x, y, beta=0.5),
    "huber": lambda m, x, y: F(m).huber_loss(x, y, reduction="none", delta=0.7),
    "kl_div": lambda m, x, y: F(m).kl_div(x.log_softmax(1), y.softmax(1), reduction="batchmean"),
    "kl_div_log_target": lambda m, x, y: F(m).kl_div(x, y.log_softmax(1), log_target=True),
    "bce_logits": lambda m, x, y: F(m).binary_cross_entropy_with_logits(x, y.sigmoid()),
    "bce_logits_pos_weight": lambda m, x, y: F(m).binary_cross_entropy_with_logits(
        x, y.sigmoid(), pos_weight=m.tensor([1.0, 2.0, 0.5], dtype=m.float64)
    ),
    "bce": lambda m, x, y: F(m).binary_cross_entropy(x.sigmoid(), y.sigmoid()),
    "normalize": lambda m, x, y: F(m).normalize(x, dim=1) * y,
    "var_mean": lambda m, x, y: m.var_mean(x, 1)[0] * 2 + m.var_mean(y, 1)[1],
    "std_mean": lambda m, x, y: m.std_mean(x * y, 0, keepdim=True)[0],
    "adaptive_max_pool": lambda m, x, y: F(m).adaptive_max_pool1d((x * y).unsqueeze(0), 2),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_more_losses(name):
    check(LOSSES[name], [(4, 3), (4, 3)])


SPLITS_AND_DIAGONALS = {
    "tensor_split_sections": lambda m, x: m.cat([p * (i + 1) for i, p in
                                                 enumerate(m.tensor_split(x, 3, dim=1))], 1),
    "tensor_split_indices": lambda m, x: tuple(p * 2 for p in x.tensor_split([1, 3], dim=0)),
    "repeat_interleave_int": lambda m, x: x.repeat_interleave(3, dim=1),
    "repeat_interleave_flat": lambda m, x: m.repeat_interleave(x, 2),
    "repeat_interleave_tensor": lambda m, x: x.repeat_interleave(m.tensor([1, 0, 2, 3]), dim=0),
    "diagonal": lambda m, x: x.diagonal() * 2,
    "diagonal_offset": lambda m, x: m.cat([m.diagonal(x, 1), m.diagonal(x, -2)]),
    "diag_2d": lambda m, x: m.diag(x, 1),
    "diag_1d": lambda m, x: m.diag(x[0], -1),
    "diag_embed": lambda m, x: m.diag_embed(x, 1),
}  # fmt: skip


@pytest.mark.parametrize("name", SPLITS_AND_DIAGONALS)
def test_splits_repeats_and_diagonals(name):
    check(SPLITS_AND_DIAGONALS[name], [(4, 5)])


def test_diagonal_of_a_batch_and_its_double_backward():
    """The diagonal's backward is an index_put, which records its own backward (an index), so
    create_graph differentiates through it; gather, index and index_select alike."""
    check(lambda m, x: m.diagonal(x, 0, 2, 0) ** 2, [(3, 2, 4)])
    check(lambda m, x: m.diag_embed(x, -1, 0, 2), [(2, 3)])
    for lib in (kiln, torch):
        x = lib.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
        (g,) = lib.autograd.grad((x.diagonal() ** 3).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        if lib is kiln:
            ours = gg.numpy()
        else:
            np.testing.assert_allclose(ours, gg.numpy())


@pytest.mark.parametrize("fn", [
    lambda m, x: x.gather(1, m.tensor([[0, 2], [1, 1], [3, 0]])) ** 2,
    lambda m, x: x[m.tensor([2, 0, 2])] ** 3,
    lambda m, x: x.index_select(1, m.tensor([3, 1])) ** 2,
])  # fmt: skip
def test_gathers_differentiate_twice(fn):
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(np.arange(1.0, 13.0).reshape(3, 4), requires_grad=True)
        (g,) = lib.autograd.grad(fn(lib, x).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), x)
        grads.append(gg.numpy())
    np.testing.assert_allclose(grads[0], grads[1])


def _with_nans(m, x):
    return m.where(x > 1.0, m.full_like(x, float("nan")), x)


RUNNING_AND_NAN_REDUCTIONS = {
    "cummax": lambda m, x: m.cummax(x, 1).values,
    "cummin_dim0": lambda m, x: x.cummin(0)[0] * 2,
    "cummax_ties": lambda m, x: m.cummax(m.cat([x, x.flip(1)], 1), 1).values,
    "aminmax_all": lambda m, x: m.stack(list(m.aminmax(x))),
    "aminmax_dim": lambda m, x: (
        m.aminmax(x, dim=1).max * 2 + x.aminmax(dim=0, keepdim=True)[0].sum()
    ),
    "nanmean_all": lambda m, x: _with_nans(m, x).nanmean(),
    "nanmean_dim": lambda m, x: m.nanmean(_with_nans(m, x), dim=1),
    "nanmean_keepdim": lambda m, x: _with_nans(m, x).nanmean((0, 1), keepdim=True),
}


@pytest.mark.parametrize("name", RUNNING_AND_NAN_REDUCTIONS)
def test_running_extremes_and_nanmean(name):
    check(RUNNING_AND_NAN_REDUCTIONS[name], [(3, 6)])


def test_lerp_number_weight_gradient_is_exact_in_float64():
    # 1 - w of a number weight is taken in double (as torch's Scalar), not in float32
    a, b = np.random.default_rng(0).random((2, 3, 4))
    grads = []
    for m in (kiln, torch):
        x = m.tensor(a, requires_grad=True)
        y = m.tensor(b, requires_grad=True)
        m.lerp(x, y, 0.3).sum().backward()
        grads.append((x.grad.numpy(), y.grad.numpy()))
    np.testing.assert_array_equal(grads[0][0], grads[1][0])
    np.testing.assert_array_equal(grads[0][1], grads[1][1])


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("widths", [(2, 1, 1, 3), (0, 0, 1, 0), (1, -1, 2, 0)])
def test_pad_gradients_equal_torch_in_every_mode(mode, widths):
    """The kernel's recorded rule (reflect/replicate/circular add each copied element's gradient
    to its source); a non-constant mode that also crops is composed of slices in Python."""
    a = np.random.default_rng(4).standard_normal((2, 3, 5, 6))
    grads = []
    for m, fn in ((torch, torch.nn.functional.pad), (kiln, kiln.nn.functional.pad)):
        x = m.tensor(a, dtype=m.float64).requires_grad_()
        out = fn(x, widths, mode=mode)
        w = np.random.default_rng(5).standard_normal(tuple(out.shape))
        (out * m.tensor(w, dtype=m.float64)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12, atol=1e-12)
