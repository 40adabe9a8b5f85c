"""kiln.nn.Transformer & co vs torch.nn's, loaded with the same weights: outputs, gradients,
state_dict keys, initialization and error messages."""

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
import kiln.nn as knn  # noqa: E402

D, HEADS, FF, S, T, N = 8, 2, 16, 5, 4, 3
TOL = {"rtol": 1e-5, "atol": 1e-5}

# torch's own notices: mixed float/bool masks are deprecated (still supported, so tested), and
# its encoder says when its nested-tensor fast path is off.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Support for mismatched:UserWarning"),
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
]


@pytest.fixture(autouse=True)
def _reference_path():
    """torch's eval-mode fast path turns padded positions into zeros in TransformerEncoder;
    kiln (like torch in training) computes them, so compare against torch's reference route."""
    old = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(old)


def to_kiln(t, requires_grad=False):
    return kiln.tensor(t.detach().numpy().copy(), requires_grad=requires_grad)


def load(km, tm):
    """Perturbs torch's LayerNorm weights/biases (1 and 0 could hide bugs), then loads torch's
    state_dict into kiln."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in tm.named_parameters():
            if ".norm" in f".{name}":
                p.add_(torch.rand(p.shape, generator=g) * 0.4 - 0.2)
    km.load_state_dict({k: to_kiln(v) for k, v in tm.state_dict().items()})


def pair(cls, *args, train=False, **kwargs):
    torch.manual_seed(0)
    tm = getattr(torch.nn, cls)(*args, **kwargs)
    km = getattr(knn, cls)(*args, **kwargs)
    load(km, tm)
    tm.train(train)
    km.train(train)
    return tm, km


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def seq(length, batch_first, seed=0, d=D):
    return rand(*((N, length, d) if batch_first else (length, N, d)), seed=seed)


def padding(length):
    """Bool key padding mask (True = ignore); every row keeps some keys."""
    m = torch.zeros(N, length, dtype=torch.bool)
    m[0, -1] = True
    m[1, -2:] = True
    return m


def causal(length):
    return torch.nn.Transformer.generate_square_subsequent_mask(length)


def run(tm, km, *args, **kwargs):
    """Calls both modules; tensors (positional or keyword) reach kiln as kiln tensors."""
    conv = lambda v: to_kiln(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
    with torch.no_grad():
        expected = tm(*args, **kwargs)
    got = km(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})
    assert tuple(got.shape) == tuple(expected.shape)
    np.testing.assert_allclose(got.detach().numpy(), expected.numpy(), **TOL)
    return got


def mask_kwargs(kind, length, prefix):
    """The masks of one case, under the keyword names of the module being called."""
    mask_name = {"src": "src_mask", "mask": "mask", "tgt": "tgt_mask"}[prefix]
    kpm_name = "src_key_padding_mask" if prefix in ("src", "mask") else "tgt_key_padding_mask"
    out = {}
    if kind in ("causal", "both"):
        out[mask_name] = causal(length)
    if kind == "bool_causal":
        out[mask_name] = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
    if kind in ("kpm", "both"):
        out[kpm_name] = padding(length)
    return out


@pytest.mark.parametrize("mask", ["none", "causal", "kpm", "both"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer(norm_first, activation, batch_first, mask):
    tm, km = pair(
        "TransformerEncoderLayer",
        D,
        HEADS,
        FF,
        activation=activation,
        batch_first=batch_first,
        norm_first=norm_first,
    )
    run(tm, km, seq(S, batch_first), **mask_kwargs(mask, S, "src"))


def test_encoder_layer_is_causal_and_unbatched():
    tm, km = pair("TransformerEncoderLayer", D, HEADS, FF)
    run(tm, km, seq(S, False), src_mask=causal(S), is_causal=True)
    run(tm, km, rand(S, D), src_mask=causal(S))
    run(tm, km, rand(S, D), src_key_padding_mask=torch.tensor([False] * (S - 1) + [True]))


@pytest.mark.parametrize("activation", ["callable", "module"])
def test_encoder_layer_custom_activation(activation):
    t_act, k_act = (
        (torch.tanh, kiln.tanh) if activation == "callable" else (torch.nn.GELU(), knn.GELU())
    )
    torch.manual_seed(0)
    tm = torch.nn.TransformerEncoderLayer(D, HEADS, FF, activation=t_act)
    km = knn.TransformerEncoderLayer(D, HEADS, FF, activation=k_act)
    assert km.activation_relu_or_gelu == tm.activation_relu_or_gelu
    assert list(km.state_dict()) == list(tm.state_dict())
    load(km, tm)
    tm.eval()
    km.eval()
    run(tm, km, seq(S, False))


def test_activation_flags_and_bad_activation():
    for act, flag in [("relu", 1), ("gelu", 2), (knn.ReLU(), 1), (kiln.nn.functional.gelu, 2)]:
        layer = knn.TransformerEncoderLayer(D, HEADS, FF, activation=act)
        assert layer.activation_relu_or_gelu == flag
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        knn.TransformerEncoderLayer(D, HEADS, FF, activation="tanh")
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        knn.TransformerDecoderLayer(D, HEADS, FF, activation="tanh")


@pytest.mark.parametrize("mask", ["none", "causal", "bool_causal", "kpm", "both"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_stack_with_final_norm(norm_first, batch_first, mask):
    torch.manual_seed(0)
    kw = {"batch_first": batch_first, "norm_first": norm_first}
    tm = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(D, HEADS, FF, **kw), 2, torch.nn.LayerNorm(D)
    )
    km = knn.TransformerEncoder(
        knn.TransformerEncoderLayer(D, HEADS, FF, **kw), 2, knn.LayerNorm(D)
    )
    assert list(km.state_dict()) == list(tm.state_dict())
    load(km, tm)
    tm.eval()
    km.eval()
    run(tm, km, seq(S, batch_first), **mask_kwargs(mask, S, "mask"))


def test_encoder_stack_without_norm_and_flags():
    torch.manual_seed(0)
    tm = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, HEADS, FF), 3)
    km = knn.TransformerEncoder(
        knn.TransformerEncoderLayer(D, HEADS, FF), 3, enable_nested_tensor=False, mask_check=False
    )
    assert km.norm is None and len(km.layers) == 3 and km.num_layers == 3
    assert not km.enable_nested_tensor and not km.mask_check
    load(km, tm)
    tm.eval()
    km.eval()
    run(tm, km, seq(S, False), mask=causal(S), is_causal=True)


def test_stack_layers_are_independent_deep_copies():
    layer = knn.TransformerEncoderLayer(D, HEADS, FF)
    enc = knn.TransformerEncoder(layer, 2)
    a, b = enc.layers[0], enc.layers[1]
    assert a is not layer and a is not b
    assert a.linear1.weight is not b.linear1.weight
    np.testing.assert_array_equal(
        a.linear1.weight.detach().numpy(), layer.linear1.weight.detach().numpy()
    )
    with kiln.no_grad():
        a.linear1.weight.fill_(0.0)
    assert np.abs(b.linear1.weight.detach().numpy()).max() > 0
    assert np.abs(layer.linear1.weight.detach().numpy()).max() > 0


@pytest.mark.parametrize("masks", ["none", "all"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer(norm_first, batch_first, masks):
    tm, km = pair(
        "TransformerDecoderLayer", D, HEADS, FF, batch_first=batch_first, norm_first=norm_first
    )
    kwargs = {}
    if masks == "all":
        kwargs = {
            "tgt_mask": causal(T),
            "memory_mask": rand(T, S, seed=5),
            "tgt_key_padding_mask": padding(T),
            "memory_key_padding_mask": padding(S),
        }
    run(tm, km, seq(T, batch_first, seed=1), seq(S, batch_first, seed=2), **kwargs)


def test_decoder_layer_causal_hints():
    tm, km = pair("TransformerDecoderLayer", D, HEADS, FF, activation="gelu")
    mem = seq(S, False, seed=2)
    run(tm, km, seq(T, False, seed=1), mem, tgt_mask=causal(T), tgt_is_causal=True)
    run(tm, km, rand(T, D, seed=1), rand(S, D, seed=2), tgt_mask=causal(T))


@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_stack_with_final_norm(batch_first):
    torch.manual_seed(0)
    tm = torch.nn.TransformerDecoder(
        torch.nn.TransformerDecoderLayer(D, HEADS, FF, batch_first=batch_first),
        2,
        torch.nn.LayerNorm(D),
    )
    km = knn.TransformerDecoder(
        knn.TransformerDecoderLayer(D, HEADS, FF, batch_first=batch_first), 2, knn.LayerNorm(D)
    )
    assert list(km.state_dict()) == list(tm.state_dict())
    load(km, tm)
    tm.eval()
    km.eval()
    tgt, mem = seq(T, batch_first, seed=1), seq(S, batch_first, seed=2)
    run(tm, km, tgt, mem, tgt_mask=causal(T), memory_key_padding_mask=padding(S))
    run(tm, km, tgt, mem, tgt_key_padding_mask=padding(T))


def transformer_pair(train=False, **kwargs):
    args = {"d_model": D, "nhead": HEADS, "num_encoder_layers": 2, "num_decoder_layers": 2}
    return pair("Transformer", dim_feedforward=FF, train=train, **args, **kwargs)


@pytest.mark.parametrize("masks", ["none", "all"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_forward(norm_first, batch_first, masks):
    tm, km = transformer_pair(batch_first=batch_first, norm_first=norm_first)
    kwargs = {}
    if masks == "all":
        kwargs = {
            "src_mask": causal(S),
            "tgt_mask": causal(T),
            "memory_mask": rand(T, S, seed=5),
            "src_key_padding_mask": padding(S),
            "tgt_key_padding_mask": padding(T),
            "memory_key_padding_mask": padding(S),
        }
    run(tm, km, seq(S, batch_first, seed=1), seq(T, batch_first, seed=2), **kwargs)


def test_transformer_unbatched_and_causal_hints():
    tm, km = transformer_pair(activation="gelu")
    run(tm, km, rand(S, D, seed=1), rand(T, D, seed=2), tgt_mask=causal(T))
    run(
        tm,
        km,
        seq(S, False, seed=1),
        seq(T, False, seed=2),
        src_mask=causal(S),
        tgt_mask=causal(T),
        src_is_causal=True,
        tgt_is_causal=True,
    )


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_gradients(batch_first, norm_first):
    tm, km = transformer_pair(
        train=True, dropout=0.0, batch_first=batch_first, norm_first=norm_first
    )
    t_src, t_tgt = seq(S, batch_first, seed=1), seq(T, batch_first, seed=2)
    t_src.requires_grad_(True)
    t_tgt.requires_grad_(True)
    k_src, k_tgt = to_kiln(t_src, True), to_kiln(t_tgt, True)
    weight = seq(T, batch_first, seed=3)
    masks = {"tgt_mask": causal(T), "src_key_padding_mask": padding(S)}
    t_out = tm(t_src, t_tgt, **masks)
    k_out = km(k_src, k_tgt, **{k: to_kiln(v) for k, v in masks.items()})
    np.testing.assert_allclose(k_out.detach().numpy(), t_out.detach().numpy(), **TOL)
    (t_out * weight).sum().backward()
    (k_out * to_kiln(weight)).sum().backward()
    np.testing.assert_allclose(k_src.grad.numpy(), t_src.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(k_tgt.grad.numpy(), t_tgt.grad.numpy(), rtol=1e-4, atol=1e-5)
    k_params, t_params = dict(km.named_parameters()), dict(tm.named_parameters())
    for name in [
        "encoder.layers.0.self_attn.in_proj_weight",
        "encoder.layers.1.linear1.weight",
        "encoder.norm.bias",
        "decoder.layers.0.multihead_attn.in_proj_weight",
        "decoder.layers.1.self_attn.out_proj.bias",
        "decoder.layers.1.linear2.weight",
        "decoder.layers.1.norm3.weight",
        "decoder.norm.weight",
    ]:
        np.testing.assert_allclose(
            k_params[name].grad.numpy(),
            t_params[name].grad.numpy(),
            rtol=1e-4,
            atol=1e-5,
            err_msg=name,
        )


@pytest.mark.parametrize("bias", [True, False])
def test_state_dict_keys_and_shapes_match_torch(bias):
    torch.manual_seed(0)
    tm = torch.nn.Transformer(D, HEADS, 2, 3, FF, bias=bias)
    km = knn.Transformer(D, HEADS, 2, 3, FF, bias=bias)
    t_sd, k_sd = tm.state_dict(), km.state_dict()
    assert list(k_sd) == list(t_sd)
    assert all(tuple(k_sd[k].shape) == tuple(v.shape) for k, v in t_sd.items())
    assert [n for n, _ in km.named_modules()] == [n for n, _ in tm.named_modules()]
    assert repr(km) == repr(tm)
    layer_keys = [k for k in k_sd if k.startswith("decoder.layers.0.")]
    assert {k.split(".")[3] for k in layer_keys} == {
        "self_attn",
        "multihead_attn",
        "linear1",
        "linear2",
        "norm1",
        "norm2",
        "norm3",
    }
    for cls in ("TransformerEncoderLayer", "TransformerDecoderLayer"):
        t_layer, k_layer = getattr(torch.nn, cls)(D, HEADS), getattr(knn, cls)(D, HEADS)
        assert list(k_layer.state_dict()) == list(t_layer.state_dict())
        assert [n for n, _ in k_layer.named_modules()] == [n for n, _ in t_layer.named_modules()]


def test_defaults():
    km = knn.Transformer()
    assert (km.d_model, km.nhead, km.batch_first) == (512, 8, False)
    assert len(km.encoder.layers) == 6 and len(km.decoder.layers) == 6
    layer = km.encoder.layers[0]
    assert layer.linear1.out_features == 2048 and layer.dropout.p == 0.1
    assert layer.norm1.eps == 1e-5 and not layer.norm_first
    assert layer.activation_relu_or_gelu == 1
    assert isinstance(km.decoder.norm, knn.LayerNorm)


def test_reset_parameters_is_xavier_uniform():
    kiln.manual_seed(0)
    km = knn.Transformer(D, HEADS, 1, 1, 64)
    layer = km.encoder.layers[0]
    bound = math.sqrt(6.0 / (64 + D))
    # Linear's own init is bounded by 1/sqrt(fan_in): 0.354 for linear1 (64, D), 0.125 for
    # linear2 (D, 64); xavier's bound (0.283) sits between, so its range shows the re-draw.
    w1, w2 = layer.linear1.weight.detach().numpy(), layer.linear2.weight.detach().numpy()
    assert np.abs(w1).max() <= bound and np.abs(w2).max() <= bound
    assert np.abs(w2).max() > 0.9 * bound
    b = layer.linear1.bias.detach().numpy()
    assert np.abs(b).max() <= 1 / math.sqrt(D)  # 1-D parameters keep their own init
    np.testing.assert_array_equal(km.decoder.norm.weight.detach().numpy(), np.ones(D))
    np.testing.assert_array_equal(
        km.decoder.layers[0].self_attn.in_proj_bias.detach().numpy(), np.zeros(3 * D)
    )


@pytest.mark.parametrize("sz", [1, 4])
def test_generate_square_subsequent_mask(sz):
    got = knn.Transformer.generate_square_subsequent_mask(sz)
    expected = torch.nn.Transformer.generate_square_subsequent_mask(sz)
    assert got.dtype == kiln.float32
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    got64 = knn.Transformer.generate_square_subsequent_mask(sz, dtype=kiln.float64)
    assert got64.dtype == kiln.float64
    assert knn.Transformer(D, HEADS, 1, 1, FF).generate_square_subsequent_mask(2).shape == (2, 2)


@pytest.mark.parametrize("batch_first", [False, True])
def test_shape_errors_match_torch(batch_first):
    tm, km = transformer_pair(batch_first=batch_first)
    cases = [
        ((S, N, D), (T, N + 1, D), "the batch number of src and tgt must be equal"),
        ((S, N, D), (T, N, D + 1), "the feature number of src and tgt must be equal to d_model"),
        ((S, N, D + 1), (T, N, D), "the feature number of src and tgt must be equal to d_model"),
    ]
    for src_shape, tgt_shape, msg in cases:
        if batch_first:
            src_shape, tgt_shape = (tuple(x[i] for i in (1, 0, 2)) for x in (src_shape, tgt_shape))
        src, tgt = rand(*src_shape), rand(*tgt_shape, seed=1)
        with pytest.raises(RuntimeError, match=msg):
            tm(src, tgt)
        with pytest.raises(RuntimeError, match=msg):
            km(to_kiln(src), to_kiln(tgt))


def test_custom_encoder_and_decoder():
    torch.manual_seed(0)
    t_enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, HEADS, FF), 1)
    t_dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(D, HEADS, FF), 1)
    k_enc = knn.TransformerEncoder(knn.TransformerEncoderLayer(D, HEADS, FF), 1)
    k_dec = knn.TransformerDecoder(knn.TransformerDecoderLayer(D, HEADS, FF), 1)
    tm = torch.nn.Transformer(D, HEADS, custom_encoder=t_enc, custom_decoder=t_dec)
    km = knn.Transformer(D, HEADS, custom_encoder=k_enc, custom_decoder=k_dec)
    assert km.encoder is k_enc and km.decoder is k_dec
    assert list(km.state_dict()) == list(tm.state_dict())
    load(km, tm)
    tm.eval()
    km.eval()
    run(tm, km, seq(S, False, seed=1), seq(T, False, seed=2), tgt_mask=causal(T))


def test_dropout_active_in_training():
    kiln.manual_seed(0)
    km = knn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.5)
    x = to_kiln(seq(S, False))
    a, b = km(x).detach().numpy(), km(x).detach().numpy()
    assert not np.allclose(a, b)
    km.eval()
    np.testing.assert_array_equal(km(x).detach().numpy(), km(x).detach().numpy())
    assert copy.deepcopy(km).dropout1.p == 0.5
