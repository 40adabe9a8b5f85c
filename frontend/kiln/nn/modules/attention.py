"""MultiheadAttention (torch.nn.MultiheadAttention): same parameters, names and forward maths,
so a torch state_dict loads and outputs/attention weights match."""

from __future__ import annotations

import math

import kiln
from kiln.nn import functional as F
from kiln.nn import init
from kiln.nn.modules.linear import NonDynamicallyQuantizableLinear
from kiln.nn.modules.module import Module
from kiln.nn.parameter import Parameter

__all__ = ["MultiheadAttention"]


def _canonical_mask(mask, name, target_dtype):
    """A bool mask (True = masked out) as an additive float mask of target_dtype."""
    if mask is None:
        return None
    if mask.dtype != kiln.bool and not mask.is_floating_point():
        raise AssertionError(f"only bool and floating types of {name} are supported")
    if mask.is_floating_point():
        return mask
    return kiln.zeros(tuple(mask.shape), dtype=target_dtype).masked_fill(mask, float("-inf"))


def _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """Validates input ranks as torch does; returns whether the input is batched."""
    qd = query.dim()
    if qd not in (2, 3):
        raise AssertionError(
            f"query should be unbatched 2D or batched 3D tensor but received {qd}-D query tensor"
        )
    batched = qd == 3
    kind = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.dim() != qd or value.dim() != qd:
        raise AssertionError(
            f"For {kind} `query`, expected `key` and `value` to be {qd}-D but found "
            f"{key.dim()}-D and {value.dim()}-D tensors respectively"
        )
    if key_padding_mask is not None and key_padding_mask.dim() != qd - 1:
        raise AssertionError(
            f"For {kind} `query`, expected `key_padding_mask` to be `None` or {qd - 1}-D but "
            f"found {key_padding_mask.dim()}-D tensor instead"
        )
    if attn_mask is not None and attn_mask.dim() not in (2, 3):
        raise AssertionError(
            f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
            f"{attn_mask.dim()}-D tensor instead"
        )
    if not batched and attn_mask is not None and attn_mask.dim() == 3:
        expected = (num_heads, query.shape[0], key.shape[0])
        if tuple(attn_mask.shape) != expected:
            raise AssertionError(
                f"Expected `attn_mask` shape to be {expected} but got {tuple(attn_mask.shape)}"
            )
    return batched


def _in_projection(mha, query, key, value):
    """q, k, v projections (seq-first); self-attention uses one fused matmul as torch does."""
    e = mha.embed_dim
    b = mha.in_proj_bias
    bq, bk, bv = (None, None, None) if b is None else (b.narrow(0, i * e, e) for i in range(3))
    if not mha._qkv_same_embed_dim:
        return (
            F.linear(query, mha.q_proj_weight, bq),
            F.linear(key, mha.k_proj_weight, bk),
            F.linear(value, mha.v_proj_weight, bv),
        )
    w = mha.in_proj_weight
    if query is key and key is value:
        proj = F.linear(query, w, b).unflatten(-1, (3, e))
        return tuple(p.contiguous() for p in proj.unbind(-2))
    wq, wk, wv = (w.narrow(0, i * e, e) for i in range(3))
    return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)


def _check_attn_mask(attn_mask, bsz, num_heads, tgt_len, src_len):
    if attn_mask is None:
        return None
    if attn_mask.dim() == 2:
        expected = (tgt_len, src_len)
        if tuple(attn_mask.shape) != expected:
            raise RuntimeError(
                f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be {expected}."
            )
        return attn_mask.unsqueeze(0)
    expected = (bsz * num_heads, tgt_len, src_len)
    if tuple(attn_mask.shape) != expected:
        raise RuntimeError(
            f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be {expected}."
        )
    return attn_mask


def _append_kv(mha, k, v, attn_mask, kpm, bsz):
    """Adds the learned bias_k/bias_v row and/or a zero row to keys and values."""
    if mha.bias_k is not None:
        e = mha.embed_dim
        k = kiln.cat([k, mha.bias_k.expand(1, bsz, e)])
        v = kiln.cat([v, mha.bias_v.expand(1, bsz, e)])
        attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
        kpm = None if kpm is None else F.pad(kpm, (0, 1))
    if mha.add_zero_attn:
        zeros = kiln.zeros((1, *tuple(k.shape)[1:]), dtype=k.dtype)
        k = kiln.cat([k, zeros])
        v = kiln.cat([v, zeros.to(v.dtype)])
        attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
        kpm = None if kpm is None else F.pad(kpm, (0, 1))
    return k, v, attn_mask, kpm


def _merge_padding_mask(attn_mask, kpm, bsz, num_heads, src_len):
    if kpm is None:
        return attn_mask
    if tuple(kpm.shape) != (bsz, src_len):
        raise AssertionError(
            f"Expected key_padded_mask.shape to be {(bsz, src_len)}, but got {tuple(kpm.shape)}"
        )
    kpm = kpm.reshape(bsz, 1, 1, src_len).expand(-1, num_heads, -1, -1)
    kpm = kpm.reshape(bsz * num_heads, 1, src_len)
    return kpm if attn_mask is None else attn_mask + kpm


def _attend_with_weights(q, k, v, attn_mask, dropout_p, num_heads, average):
    """Explicit softmax(q k^T / sqrt(d) + mask) v, returning the attention weights too."""
    scores = kiln.bmm(q * math.sqrt(1.0 / float(q.size(-1))), k.transpose(-2, -1))
    if attn_mask is not None:
        scores = scores + attn_mask
    weights = F.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    out = kiln.bmm(weights, v)
    bh, tgt_len, src_len = tuple(weights.shape)
    weights = weights.view(bh // num_heads, num_heads, tgt_len, src_len)
    if average:
        weights = weights.mean(dim=1)
    return out, weights


def _attend_sdpa(q, k, v, attn_mask, dropout_p, is_causal, bsz, num_heads):
    if attn_mask is not None:
        if attn_mask.size(0) == 1 and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(0)
        else:
            attn_mask = attn_mask.reshape(bsz, num_heads, -1, attn_mask.size(-1))
    q, k, v = (t.reshape(bsz, num_heads, t.size(1), t.size(2)) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
    return out.reshape(bsz * num_heads, out.size(2), out.size(3))


def _mha_forward(mha, query, key, value, kpm, need_weights, attn_mask, average, is_causal):
    """torch's F.multi_head_attention_forward for seq-first (L, N, E) or unbatched (L, E)."""
    batched = _check_shapes(query, key, value, kpm, attn_mask, mha.num_heads)
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        kpm = None if kpm is None else kpm.unsqueeze(0)
    tgt_len, bsz, embed_dim = tuple(query.shape)
    if embed_dim != mha.embed_dim:
        raise AssertionError(
            f"was expecting embedding dimension of {mha.embed_dim}, but got {embed_dim}"
        )
    kpm = _canonical_mask(kpm, "key_padding_mask", query.dtype)
    if is_causal and attn_mask is None:
        raise RuntimeError(
            "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
            "module method `generate_square_subsequent_mask` to create this mask."
        )
    if is_causal and kpm is None and not need_weights:
        attn_mask = None  # SDPA applies the causal mask itself
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", query.dtype)
        is_causal = is_causal and kpm is None
    q, k, v = _in_projection(mha, query, key, value)
    attn_mask = _check_attn_mask(attn_mask, bsz, mha.num_heads, tgt_len, key.size(0))
    k, v, attn_mask, kpm = _append_kv(mha, k, v, attn_mask, kpm, bsz)
    heads, hd = bsz * mha.num_heads, mha.head_dim
    q = q.reshape(tgt_len, heads, hd).transpose(0, 1)
    k = k.reshape(k.size(0), heads, hd).transpose(0, 1)
    v = v.reshape(v.size(0), heads, hd).transpose(0, 1)
    attn_mask = _merge_padding_mask(attn_mask, kpm, bsz, mha.num_heads, k.size(1))
    dropout_p = mha.dropout if mha.training else 0.0
    if need_weights:
        out, weights = _attend_with_weights(q, k, v, attn_mask, dropout_p, mha.num_heads, average)
    else:
        out = _attend_sdpa(q, k, v, attn_mask, dropout_p, is_causal, bsz, mha.num_heads)
        weights = None
    out = out.transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
    out = F.linear(out, mha.out_proj.weight, mha.out_proj.bias).view(tgt_len, bsz, -1)
    if not batched:
        out = out.squeeze(1)
        weights = None if weights is None else weights.squeeze(0)
    return out, weights


class MultiheadAttention(Module):
    """Multi-head attention: softmax(Q K^T / sqrt(head_dim) + mask) V over ``num_heads`` heads.

    Parameters follow torch: ``in_proj_weight`` (3E, E) and ``in_proj_bias`` when key/value
    dims equal embed_dim (else ``q/k/v_proj_weight``), and ``out_proj`` (a Linear).
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        dropout=0.0,
        bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        kdim=None,
        vdim=None,
        batch_first=False,
        device=None,
        dtype=None,
    ) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                f"and num_heads={num_heads} instead"
            )
        super().__init__()
        fk = {"device": device, "dtype": dtype}
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(kiln.empty((embed_dim, embed_dim), **fk))
            self.k_proj_weight = Parameter(kiln.empty((embed_dim, self.kdim), **fk))
            self.v_proj_weight = Parameter(kiln.empty((embed_dim, self.vdim), **fk))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(kiln.empty((3 * embed_dim, embed_dim), **fk))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(kiln.empty(3 * embed_dim, **fk))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **fk)
        if add_bias_kv:
            self.bias_k = Parameter(kiln.empty((1, 1, embed_dim), **fk))
            self.bias_v = Parameter(kiln.empty((1, 1, embed_dim), **fk))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        """Returns (attn_output, attn_weights or None); batch_first inputs are (N, L, E)."""
        batched = query.dim() == 3
        if self.batch_first and batched:
            # Transposing the same tensor once keeps the identity test that picks the fused
            # self-attention projection.
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = (x.transpose(1, 0) for x in (query, key))
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        out, weights = _mha_forward(
            self,
            query,
            key,
            value,
            key_padding_mask,
            need_weights,
            attn_mask,
            average_attn_weights,
            is_causal,
        )
        if self.batch_first and batched:
            out = out.transpose(1, 0)
        return out, weights
