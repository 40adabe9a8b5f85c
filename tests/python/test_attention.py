"""F.scaled_dot_product_attention against torch's."""

import pytest
import torch
import torch.nn.functional as TF
from conftest import FLOAT_DTYPES, assert_close, make, to_kiln

import kiln
import kiln.nn.functional as F

ATTN_TOL = {
    "float16": (2e-3, 2e-3),
    "bfloat16": (2e-2, 2e-2),
    "float32": (2e-6, 1e-4),
    "float64": (1e-10, 1e-10),
}


def check(k, t):
    atol, rtol = ATTN_TOL[str(t.dtype).replace("torch.", "")]
    assert_close(k, t, atol=atol, rtol=rtol)


def qkv(q_shape, k_shape, v_shape, dtype="float32"):
    tq, kq = make(q_shape, dtype, seed=0)
    tk, kk = make(k_shape, dtype, seed=1)
    tv, kv = make(v_shape, dtype, seed=2)
    return (tq, tk, tv), (kq, kk, kv)


def compare(t_args, k_args, **kwargs):
    t_kwargs = dict(kwargs)
    k_kwargs = {k: to_kiln(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    want = TF.scaled_dot_product_attention(*t_args, **t_kwargs)
    got = F.scaled_dot_product_attention(*k_args, **k_kwargs)
    check(got, want)


SHAPES = [
    ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)),  # 4-D, L != S, E != Ev
    ((3, 5, 4), (3, 7, 4), (3, 7, 4)),  # 3-D
    ((6, 8), (6, 8), (6, 3)),  # 2-D
    ((1, 2, 3, 4, 8), (1, 2, 3, 4, 8), (1, 2, 3, 4, 8)),  # 5-D
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shapes", SHAPES)
def test_sdpa_matches_torch(dtype, shapes):
    t_args, k_args = qkv(*shapes, dtype=dtype)
    compare(t_args, k_args)
    compare(t_args, k_args, is_causal=True)
    compare(t_args, k_args, scale=0.3)


@pytest.mark.parametrize("L, S", [(64, 64), (65, 65), (130, 130), (129, 200), (200, 129),
                                  (100, 37), (37, 100)])
def test_causal_rows_across_row_blocks(L, S):
    """The causal kernel computes each 64-row block against its visible keys only: blocks that
    end inside, at and past the last key, with L != S either way, equal torch."""
    t_args, k_args = qkv((2, 3, L, 16), (2, 3, S, 16), (2, 3, S, 5), dtype="float32")
    compare(t_args, k_args, is_causal=True)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("mask_shape", [(4, 5), (2, 1, 4, 5), (1, 3, 1, 5)])
def test_sdpa_bool_and_float_masks(dtype, mask_shape):
    t_args, k_args = qkv((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), dtype=dtype)
    g = torch.Generator().manual_seed(7)
    keep = torch.rand(mask_shape, generator=g) > 0.4
    compare(t_args, k_args, attn_mask=keep)
    additive = torch.randn(mask_shape, generator=g).to(getattr(torch, dtype))
    compare(t_args, k_args, attn_mask=additive)
    compare(t_args, k_args, attn_mask=additive.float())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sdpa_fully_masked_rows_match_torch(dtype):
    t_args, k_args = qkv((2, 2, 4, 8), (2, 2, 5, 8), (2, 2, 5, 6), dtype=dtype)
    keep = torch.ones(4, 5, dtype=torch.bool)
    keep[1] = False
    compare(t_args, k_args, attn_mask=keep)
    additive = torch.zeros(4, 5, dtype=getattr(torch, dtype))
    additive[2] = float("-inf")
    additive[3, 0] = float("nan")  # NaN scores give NaN rows
    compare(t_args, k_args, attn_mask=additive)


@pytest.mark.parametrize("lengths", [(3, 7), (7, 3), (5, 5)])
def test_sdpa_causal_is_top_left_aligned(lengths):
    L, S = lengths
    t_args, k_args = qkv((2, L, 8), (2, S, 8), (2, S, 4))
    compare(t_args, k_args, is_causal=True)


def test_sdpa_grouped_query_attention_and_batch_broadcast():
    t_args, k_args = qkv((2, 6, 4, 8), (2, 3, 5, 8), (2, 2, 5, 6))
    compare(t_args, k_args, enable_gqa=True)
    t_args, k_args = qkv((2, 6, 4, 8), (1, 3, 5, 8), (1, 3, 5, 6))
    compare(t_args, k_args, enable_gqa=True, is_causal=True)
    t_args, k_args = qkv((2, 3, 4, 8), (1, 1, 5, 8), (2, 1, 5, 6))
    compare(t_args, k_args)


def test_sdpa_non_contiguous_inputs():
    # The usual (B, L, H, E) -> (B, H, L, E) transpose, and a key sliced out of a longer one.
    tq, kq = make((2, 4, 3, 8), "float32")
    tk, kk = make((2, 9, 3, 8), "float32", seed=1)
    tv, kv = make((2, 6, 3, 8), "float32", seed=2)
    t_args = (tq.transpose(1, 2), tk.narrow(1, 2, 6).transpose(1, 2), tv.transpose(1, 2))
    k_args = (kq.transpose(1, 2), kk.narrow(1, 2, 6).transpose(1, 2), kv.transpose(1, 2))
    assert not k_args[0].is_contiguous()
    compare(t_args, k_args)
    mask = torch.rand(6, 4, generator=torch.Generator().manual_seed(1)) > 0.3
    compare(t_args, k_args, attn_mask=mask.t())


def test_sdpa_many_row_blocks_and_heads():
    # L > 64 spans several row blocks; enough work for the thread pool.
    t_args, k_args = qkv((2, 4, 130, 16), (2, 4, 70, 16), (2, 4, 70, 16))
    compare(t_args, k_args, is_causal=True)


@pytest.mark.parametrize(
    "shapes",
    [
        ((2, 0, 4, 8), (2, 0, 5, 8), (2, 0, 5, 6)),  # no heads
        ((2, 3, 0, 8), (2, 3, 5, 8), (2, 3, 5, 6)),  # L = 0
        ((2, 3, 4, 8), (2, 3, 0, 8), (2, 3, 0, 6)),  # S = 0: zeros like torch
        ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 0)),  # Ev = 0
    ],
)
def test_sdpa_zero_size(shapes):
    t_args, k_args = qkv(*shapes)
    compare(t_args, k_args)


def test_sdpa_dropout_keeps_expectation_and_is_seeded():
    # Uniform attention (q = 0) over S keys of all-ones values: each output is
    # kept / (S * (1 - p)), a multiple of 1 / (S * (1 - p)) whose mean over many rows is 1.
    S, p = 8, 0.25
    q = to_kiln(torch.zeros(4, 500, 4))
    k = to_kiln(torch.randn(4, S, 4))
    v = to_kiln(torch.ones(4, S, 3))
    kiln.manual_seed(0)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    kiln.manual_seed(0)
    again = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    got = torch.from_numpy(out.numpy().copy())
    assert torch.equal(got, torch.from_numpy(again.numpy().copy()))
    steps = got * S * (1 - p)
    assert torch.allclose(steps, steps.round(), atol=1e-4)
    assert abs(got.mean().item() - 1.0) < 0.03
    assert (got[..., 0] == got[..., 1]).all()  # one mask entry per probability, not per value
    dropped = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert_close(dropped, torch.zeros(4, 500, 3))


def test_sdpa_errors():
    _, (q, k, v) = qkv((2, 4, 8), (2, 5, 8), (2, 5, 6))
    with pytest.raises(RuntimeError, match="same dtype.*float32.*float64"):
        F.scaled_dot_product_attention(q, k.double(), v)
    with pytest.raises(RuntimeError, match="attn_mask dtype.*float64.*float32"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=to_kiln(torch.zeros(4, 5).double()))
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(
            q, k, v, attn_mask=to_kiln(torch.ones(4, 5, dtype=torch.bool)), is_causal=True
        )
    with pytest.raises(RuntimeError, match=r"attn_mask of shape \[3, 2, 4, 5\] must broadcast"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=to_kiln(torch.zeros(3, 2, 4, 5)))
    with pytest.raises(RuntimeError, match=r"embedding size E.*\[2, 4, 8\].*\[2, 5, 7\]"):
        F.scaled_dot_product_attention(q, make((2, 5, 7), "float32")[1], v)
    with pytest.raises(RuntimeError, match=r"sequence length S.*\[2, 5, 8\].*\[2, 4, 6\]"):
        F.scaled_dot_product_attention(q, k, make((2, 4, 6), "float32")[1])
    with pytest.raises(RuntimeError, match="at least 2 dimensional.*query.dim: 1"):
        F.scaled_dot_product_attention(make((8,), "float32")[1], k, v)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\]"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    with pytest.raises(NotImplementedError, match="int64"):
        F.scaled_dot_product_attention(q.long(), k.long(), v.long())
    _, (q4, k4, v4) = qkv((2, 4, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8))
    with pytest.raises(RuntimeError, match=r"heads in key \(3\).*query \(4\)"):
        F.scaled_dot_product_attention(q4, k4, v4, enable_gqa=True)
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        F.scaled_dot_product_attention(q4, k4, v4)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_grouped_query_attention_gradients_match_torch(causal):
    """enable_gqa under autograd: each key/value head's gradient sums the query heads that read
    it (key and value may have different head counts, and a batch of one broadcasts)."""
    t_args, k_args = qkv((2, 6, 4, 8), (2, 3, 5, 8), (1, 2, 5, 6))
    t_args = [t.clone().requires_grad_() for t in t_args]
    k_args = [k.clone().requires_grad_() for k in k_args]
    want = TF.scaled_dot_product_attention(*t_args, enable_gqa=True, is_causal=causal)
    got = F.scaled_dot_product_attention(*k_args, enable_gqa=True, is_causal=causal)
    check(got, want)
    (want * want).sum().backward()
    (got * got).sum().backward()
    for k, t in zip(k_args, t_args, strict=True):
        assert_close(k.grad, t.grad, atol=2e-5, rtol=1e-4)  # sums of 2-3 heads' rounding
