"""Functional forms (kiln.nn.functional) of the shape ops: pad, one_hot and embedding."""

from kiln import _C

__all__ = ["embedding", "one_hot", "pad"]


def pad(input, pad, mode="constant", value=None):  # noqa: A002 - torch's argument names
    """torch.nn.functional.pad: `pad` lists (left, right) amounts from the last dim backwards;
    mode is 'constant' (negative amounts crop), 'reflect', 'replicate' or 'circular'."""
    return _C.pad(input, list(pad), mode, value)


def one_hot(tensor, num_classes=-1):
    """torch.nn.functional.one_hot: int64 class indices -> int64 one-hot vectors (new last dim)."""
    return _C._one_hot(tensor, num_classes)


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

    padding_idx only matters for gradients (kiln's eager ops have none) but is validated like
    torch does. max_norm (which renormalizes `weight` in place) is not supported.
    """
    if max_norm is not None:
        raise NotImplementedError("embedding: max_norm is not supported")
    return _C._embedding(input, weight, padding_idx)
