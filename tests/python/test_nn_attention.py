"""kiln.nn.MultiheadAttention vs torch.nn.MultiheadAttention loaded with the same weights."""

import pytest
import torch
from conftest import assert_close, make, to_kiln
from models.helpers import pair

import kiln
import kiln.nn as knn

E, HEADS, L, S, N = 8, 2, 5, 6, 3


def causal_mask(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def run(tm, km, t_args, kwargs):
    """Calls both modules; tensors in kwargs are given to kiln as kiln tensors."""
    k_args = [to_kiln(a) for a in t_args]
    if t_args[0] is t_args[1] and t_args[1] is t_args[2]:
        k_args = [k_args[0]] * 3  # keep the self-attention identity (fused projection path)
    elif t_args[1] is t_args[2]:
        k_args[2] = k_args[1]
    k_kwargs = {k: to_kiln(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with torch.no_grad():
        t_out, t_w = tm(*t_args, **kwargs)
    k_out, k_w = km(*k_args, **k_kwargs)
    assert_close(k_out, t_out, atol=1e-5, rtol=1e-4)
    if t_w is None:
        assert k_w is None
    else:
        assert_close(k_w, t_w, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("average", [True, False])
def test_self_attention(batch_first, need_weights, average):
    tm, km = pair("MultiheadAttention", E, HEADS, batch_first=batch_first)
    tm.eval()
    km.eval()
    x, _ = make((N, L, E) if batch_first else (L, N, E), "float32")
    run(tm, km, (x, x, x), {"need_weights": need_weights, "average_attn_weights": average})


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize(
    "mask_kind", ["bool", "float", "causal", "kpm_bool", "kpm_float", "both", "3d"]
)
def test_masks(mask_kind, need_weights):
    tm, km = pair("MultiheadAttention", E, HEADS)
    tm.eval()
    km.eval()
    x, _ = make((L, N, E), "float32")
    kpm = torch.zeros(N, L, dtype=torch.bool)
    kpm[:, -2:] = True
    kwargs = {"need_weights": need_weights}
    if mask_kind == "bool":
        kwargs["attn_mask"] = causal_mask(L)
    elif mask_kind == "float":
        kwargs["attn_mask"] = torch.randn(L, L, generator=torch.Generator().manual_seed(1))
    elif mask_kind == "causal":
        kwargs.update(attn_mask=causal_mask(L), is_causal=True)
    elif mask_kind == "kpm_bool":
        kwargs["key_padding_mask"] = kpm
    elif mask_kind == "kpm_float":
        kwargs["key_padding_mask"] = torch.zeros(N, L).masked_fill(kpm, -1e4)
    elif mask_kind == "both":
        kwargs.update(attn_mask=causal_mask(L), key_padding_mask=kpm.flip(1))
    else:
        kwargs["attn_mask"] = causal_mask(L).expand(N * HEADS, L, L).contiguous()
    run(tm, km, (x, x, x), kwargs)


@pytest.mark.parametrize("need_weights", [True, False])
def test_cross_attention_and_separate_kv(need_weights):
    tm, km = pair("MultiheadAttention", E, HEADS, batch_first=True)
    q, _ = make((N, L, E), "float32", seed=1)
    kv, _ = make((N, S, E), "float32", seed=2)
    v, _ = make((N, S, E), "float32", seed=3)
    run(tm, km, (q, kv, kv), {"need_weights": need_weights})
    run(tm, km, (q, kv, v), {"need_weights": need_weights})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bias": False},
        {"kdim": 4, "vdim": 6},
        {"add_bias_kv": True},
        {"add_zero_attn": True},
        {"dropout": 0.5},  # no effect in eval mode
    ],
)
def test_variants(kwargs):
    tm, km = pair("MultiheadAttention", E, HEADS, **kwargs)
    tm.eval()
    km.eval()
    assert list(km.state_dict()) == list(tm.state_dict())
    q, _ = make((L, N, E), "float32", seed=1)
    k, _ = make((S, N, kwargs.get("kdim", E)), "float32", seed=2)
    v, _ = make((S, N, kwargs.get("vdim", E)), "float32", seed=3)
    run(tm, km, (q, k, v), {})
    run(tm, km, (q, k, v), {"need_weights": False})


def test_unbatched_input():
    tm, km = pair("MultiheadAttention", E, HEADS)
    x, _ = make((L, E), "float32")
    run(tm, km, (x, x, x), {})
    run(tm, km, (x, x, x), {"attn_mask": causal_mask(L), "need_weights": False})
    run(tm, km, (x, x, x), {"key_padding_mask": torch.tensor([False] * (L - 1) + [True])})


def test_parameter_names_match_torch():
    tm, km = pair("MultiheadAttention", E, HEADS)
    assert [n for n, _ in km.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert [n for n, _ in km.named_parameters()] == [
        "in_proj_weight",
        "in_proj_bias",
        "out_proj.weight",
        "out_proj.bias",
    ]
    kiln.manual_seed(0)
    fresh = knn.MultiheadAttention(E, HEADS)
    assert fresh.in_proj_bias.detach().abs().max().item() == 0.0
    assert fresh.out_proj.bias.detach().abs().max().item() == 0.0
    bound = (6 / (E + 3 * E)) ** 0.5  # xavier_uniform_ on the (3E, E) in_proj_weight
    assert 0 < fresh.in_proj_weight.detach().abs().max().item() <= bound


def test_errors():
    m = knn.MultiheadAttention(E, HEADS)
    x = kiln.zeros((L, N, E))
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(AssertionError, match="was expecting embedding dimension of 8, but got 4"):
        y = kiln.zeros((L, N, 4))
        m(y, y, y)
    with pytest.raises(RuntimeError, match="The shape of the 2D attn_mask is"):
        m(x, x, x, attn_mask=kiln.zeros((L, L + 1)))
    with pytest.raises(AssertionError, match="only bool and floating types of attn_mask"):
        m(x, x, x, attn_mask=kiln.zeros((L, L), dtype=kiln.int64))
    with pytest.raises(AssertionError, match="query should be unbatched 2D or batched 3D"):
        z = kiln.zeros((1, L, N, E))
        m(z, z, z)
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        knn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match="embed_dim and num_heads must be greater than 0"):
        knn.MultiheadAttention(8, 0)
