"""torch's top-level names of ops kiln has in kiln.nn.functional (torch.cosine_similarity,
torch.pixel_shuffle, torch.embedding with its weight-first order, ...), pdist, the in-place
activations torch.sigmoid_/tanh_, and the window functions of signal code (hann, hamming,
blackman, bartlett, kaiser). Written in kiln ops, so the capture inlines them."""

from __future__ import annotations

import math

import kiln
import kiln.nn.functional as F

__all__ = ["bartlett_window", "blackman_window", "channel_shuffle", "cosine_similarity",
           "embedding", "hamming_window", "hann_window", "hardshrink", "kaiser_window",
           "pairwise_distance", "pdist", "pixel_shuffle", "pixel_unshuffle", "prelu", "rrelu",
           "sigmoid_", "tanh_"]  # fmt: skip

cosine_similarity = F.cosine_similarity
pairwise_distance = F.pairwise_distance
pixel_shuffle = F.pixel_shuffle
pixel_unshuffle = F.pixel_unshuffle
channel_shuffle = F.channel_shuffle
prelu = F.prelu
rrelu = F.rrelu
hardshrink = F.hardshrink


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """torch.embedding: the weight comes first and padding_idx -1 means none (F.embedding's
    order and None are the functional's)."""
    return F.embedding(indices, weight, None if padding_idx == -1 else padding_idx,
                       scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)  # fmt: skip


def sigmoid_(input):  # noqa: A002 - torch's argument names
    return input.sigmoid_()


def tanh_(input):  # noqa: A002
    return input.tanh_()


def pdist(input, p=2):  # noqa: A002
    """The p-norm distance between each pair of rows i < j of an (N, M) input, in row-major pair
    order (the upper triangle of cdist, without its diagonal of zeros). Compiled code breaks the
    graph at the pair list (triu_indices reads a mask)."""
    if input.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    n = input.shape[0]
    rows, cols = kiln.triu_indices(n, n, 1, device=input.device)
    return (input[rows] - input[cols]).norm(p, dim=1)


def _positions(window_length: int, periodic: bool, dtype, device):
    """n / (N - 1) for n in 0..N-1 of the symmetric window (N + 1 points when periodic, the last
    dropped), in float64; None for the lengths torch answers directly (0 and 1)."""
    if window_length < 0:
        raise RuntimeError(f"window_length must be non-negative, got {window_length}")
    if window_length <= 1:
        return None
    points = window_length + 1 if periodic else window_length
    return kiln.arange(window_length, dtype=kiln.float64, device=device) / (points - 1)


def _window(values, window_length, dtype, device, requires_grad):
    dtype = dtype or kiln.get_default_dtype()
    if values is None:
        window = kiln.ones(window_length, dtype=dtype, device=device)
    else:
        window = values.to(dtype)
    # only when asked: an in-place flag change would be an eager node in compiled code
    return window.requires_grad_(True) if requires_grad else window


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None,
                   layout=None, device=None, pin_memory=False, requires_grad=False):  # fmt: skip
    """alpha - beta cos(2 pi n / (N - 1))."""
    t = _positions(window_length, periodic, dtype, device)
    values = None if t is None else alpha - beta * (2 * math.pi * t).cos()
    return _window(values, window_length, dtype, device, requires_grad)


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                pin_memory=False, requires_grad=False):  # fmt: skip
    """0.5 - 0.5 cos(2 pi n / (N - 1)): the Hamming window with alpha = beta = 1/2."""
    return hamming_window(window_length, periodic, 0.5, 0.5, dtype=dtype, device=device,
                          requires_grad=requires_grad)  # fmt: skip


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    pin_memory=False, requires_grad=False):  # fmt: skip
    """0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08 cos(4 pi n / (N - 1))."""
    t = _positions(window_length, periodic, dtype, device)
    values = None if t is None else (0.42 - 0.5 * (2 * math.pi * t).cos()
                                     + 0.08 * (4 * math.pi * t).cos())  # fmt: skip
    return _window(values, window_length, dtype, device, requires_grad)


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    pin_memory=False, requires_grad=False):  # fmt: skip
    """1 - |2n / (N - 1) - 1|: a triangle."""
    t = _positions(window_length, periodic, dtype, device)
    values = None if t is None else 1 - (2 * t - 1).abs()
    return _window(values, window_length, dtype, device, requires_grad)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None,
                  device=None, pin_memory=False, requires_grad=False):  # fmt: skip
    """I0(beta sqrt(1 - (2n / (N - 1) - 1)^2)) / I0(beta)."""
    t = _positions(window_length, periodic, dtype, device)
    values = None
    if t is not None:
        arg = (1 - (2 * t - 1).pow(2)).clamp(min=0).sqrt() * beta
        values = kiln.i0(arg) / kiln.i0(kiln.tensor(float(beta), dtype=kiln.float64))
    return _window(values, window_length, dtype, device, requires_grad)
