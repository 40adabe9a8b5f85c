"""gradcheck (float64, central finite differences) of the differentiable ops whose gradients
against torch are tested in their own files: scatters and gathers, scans, selections and sorts,
interpolation, unfold/fold, transposed convolutions, padding and the normalizations."""

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F

G = np.random.default_rng(21)
IDX = kiln.tensor([[0, 2, 1, 0], [2, 1, 0, 1]])


def _distinct(*shape):
    """Values far apart, so sorts and selections have no near-ties for eps to flip."""
    n = int(np.prod(shape))
    return G.permutation(n).reshape(shape) * 0.1 + 0.01 * G.standard_normal(shape)


CASES = {
    "gather": (lambda x: x.gather(0, IDX), [(3, 4)]),
    "index_select": (lambda x: x.index_select(1, kiln.tensor([3, 0, 0])), [(3, 4)]),
    "index": (lambda x: x[kiln.tensor([2, 0, 2])] * 2, [(3, 4)]),
    "scatter": (lambda x, s: kiln.scatter(x, 1, kiln.tensor([[0], [3], [1]]), s), [(3, 4), (3, 1)]),
    "scatter_add": (lambda x, s: kiln.scatter_add(x, 0, IDX, s), [(3, 4), (2, 4)]),
    "index_add": (lambda x, s: x.index_add(0, kiln.tensor([1, 1]), s, alpha=2), [(3, 4), (2, 4)]),
    "index_put": (lambda x, v: kiln.index_put(x, (kiln.tensor([0, 2]),), v), [(3, 4), (4,)]),
    "cumsum": (lambda x: x.cumsum(1), [(3, 4)]),
    "cumprod": (lambda x: x.cumprod(0), [(3, 4)]),
    "logcumsumexp": (lambda x: x.logcumsumexp(1), [(3, 4)]),
    "cummax": (lambda x: x.cummax(1).values, "distinct"),
    "kthvalue": (lambda x: x.kthvalue(2, 1).values, "distinct"),
    "median": (lambda x: x.median(0).values, "distinct"),
    "sort": (lambda x: x.sort(1, descending=True).values, "distinct"),
    "topk": (lambda x: x.topk(2, 1).values, "distinct"),
    "max_dim": (lambda x: x.max(1).values, "distinct"),
    "interp_nearest": (lambda x: F.interpolate(x, scale_factor=2), [(1, 2, 3, 3)]),
    "interp_bilinear": (
        lambda x: F.interpolate(x, size=(5, 4), mode="bilinear", align_corners=False),
        [(1, 2, 3, 3)],
    ),
    "interp_trilinear": (
        lambda x: F.interpolate(x, scale_factor=1.5, mode="trilinear", align_corners=True),
        [(1, 1, 2, 3, 2)],
    ),
    "unfold": (lambda x: F.unfold(x, 2, padding=1, stride=2), [(1, 2, 4, 3)]),
    "fold": (lambda x: F.fold(x, (3, 3), 2), [(1, 8, 4)]),
    "conv_transpose1d": (
        lambda x, w: F.conv_transpose1d(x, w, stride=2, output_padding=1),
        [(2, 3, 4), (3, 2, 3)],
    ),
    "conv_transpose2d": (
        lambda x, w: F.conv_transpose2d(x, w, padding=1, groups=2),
        [(1, 4, 3, 3), (4, 1, 2, 3)],
    ),
    "pad_constant": (lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), [(2, 3, 4)]),
    "pad_reflect": (lambda x: F.pad(x, (2, 1), mode="reflect"), [(2, 3, 4)]),
    "pad_replicate": (lambda x: F.pad(x, (1, 1, 2, 0), mode="replicate"), [(1, 2, 3, 3)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 3), (4,), (4,)]),
    "instance_norm": (lambda x: F.instance_norm(x), [(2, 3, 5)]),
    "layer_norm": (lambda x, w: F.layer_norm(x, (4,), w), [(3, 4), (4,)]),
    "batch_norm": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        [(4, 3, 2), (3,), (3,)],
    ),
    "rms_norm": (lambda x, w: F.rms_norm(x, (4,), w), [(3, 4), (4,)]),
    "cross_entropy": (
        lambda x: F.cross_entropy(x, kiln.tensor([1, 0, 3]), label_smoothing=0.1),
        [(3, 4)],
    ),
    "nll_loss": (lambda x: F.nll_loss(x.log_softmax(-1), kiln.tensor([2, 0, 1])), [(3, 4)]),
    "smooth_l1": (lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), [(3, 4), (3, 4)]),
    "bce_logits": (
        lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid()),
        [(3, 4), (3, 4)],
    ),
    "sdpa": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)],
    ),
    "embedding": (lambda w: F.embedding(kiln.tensor([[0, 2], [2, 1]]), w), [(3, 4)]),
    "cdist": (lambda x, y: kiln.cdist(x, y), [(3, 4), (2, 4)]),
    "einsum": (lambda x, y: kiln.einsum("ij,kj->ik", x, y), [(3, 4), (2, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck(name):
    fn, shapes = CASES[name]
    if shapes == "distinct":
        arrays = [_distinct(3, 4)]
    else:
        arrays = [G.standard_normal(s) for s in shapes]
    inputs = [kiln.tensor(a, dtype=kiln.float64, requires_grad=True) for a in arrays]
    assert kiln.autograd.gradcheck(fn, inputs)
