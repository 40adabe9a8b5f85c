"""Functional forms (kiln.nn.functional) of the shape ops: pad, one_hot and embedding."""

import kiln
from kiln import _C
from kiln._schema import torch_schema

__all__ = ["embedding", "one_hot", "pad"]


def pad(input, pad, mode="constant", value=None):  # noqa: A002 - torch's argument names
    """torch.nn.functional.pad: `pad` lists (left, right) amounts from the last dim backwards;
    mode is 'constant' (negative amounts crop), 'reflect', 'replicate' or 'circular'. The kernel
    records its derivative (autograd/derivatives_layout.h) for every mode; with autograd on, a
    non-constant mode that also crops is written as slices, flips and a cat (their derivative)
    after the kernel checked the arguments."""
    if mode == "constant" or not (kiln.is_grad_enabled() and input.requires_grad) or min(
        pad, default=0) >= 0:
        return _C.pad(input, list(pad), mode, value)
    with kiln.no_grad():
        _C.pad(input.detach(), list(pad), mode, value)  # eager's argument checks and errors
    x = input
    for k in range(len(pad) // 2):
        x = _pad_dim(x, x.dim() - 1 - k, pad[2 * k], pad[2 * k + 1], mode)
    return x


def _pad_dim(x, dim, left, right, mode):
    """One dim of a reflect / replicate / circular pad (a negative amount crops)."""
    n = x.shape[dim]
    if left < 0:
        x, n, left = x.narrow(dim, -left, n + left), n + left, 0
    if right < 0:
        x, n, right = x.narrow(dim, 0, n + right), n + right, 0
    parts = [_edge(x, dim, n, left, mode, True), x, _edge(x, dim, n, right, mode, False)]
    parts = [p for p in parts if p is not None]
    return _C.cat(parts, dim) if len(parts) > 1 else x


def _edge(x, dim, n, amount, mode, before):
    """The `amount` elements a pad adds before (or after) x along dim, or None for none."""
    if not amount:
        return None
    if mode == "reflect":
        return x.narrow(dim, 1 if before else n - 1 - amount, amount).flip(dim)
    if mode == "replicate":
        return x.narrow(dim, 0 if before else n - 1, 1).expand(*_sized(x, dim, amount))
    return x.narrow(dim, n - amount if before else 0, amount)  # circular


def _sized(x, dim, size):
    shape = list(x.shape)
    shape[dim] = size
    return shape



one_hot = _C._nn.one_hot  # bound from its ops.def row

@torch_schema(
    "embedding(Tensor input, Tensor weight, int? padding_idx=None, float? max_norm=None, "
    "float norm_type=2.0, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor"
)
def embedding(
    input,  # noqa: A002
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type=2.0,
    scale_grad_by_freq=False,
    sparse=False,
):
    """torch.nn.functional.embedding: the rows of `weight` at the integer `input` indices.

    padding_idx's row gets no gradient and is validated like torch does. With max_norm, the rows
    the lookup reads are first renormalized in place (torch's embedding_renorm_): a row whose
    norm_type-norm exceeds max_norm is scaled by max_norm / (norm + 1e-7).
    """
    if max_norm is not None:
        _embedding_renorm_(weight, input, float(max_norm), float(norm_type))
    return _C._embedding(input, weight, padding_idx)


def _embedding_renorm_(weight, input, max_norm: float, norm_type: float) -> None:
    with kiln.no_grad():
        rows = input.reshape(-1).unique()
        read = weight[rows]
        norms = read.norm(norm_type, dim=1, keepdim=True)
        scale = kiln.where(norms > max_norm, max_norm / (norms + 1e-7), kiln.ones_like(norms))
        weight[rows] = read * scale
