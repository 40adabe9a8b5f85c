"""F.ctc_loss / nn.CTCLoss against torch: padded and concatenated targets, repeated labels,
empty targets, every reduction, zero_infinity, an unbatched input, and gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln

T, N, C, S = 12, 3, 6, 4


def _case(seed, repeats=False):
    g = np.random.default_rng(seed)
    lp = g.standard_normal((T, N, C)).astype(np.float32)
    targets = g.integers(1, C, (N, S))
    if repeats:
        targets[:, 1] = targets[:, 0]
    return lp, targets


def _run(lib, lp, targets, in_lens, tgt_lens, **kwargs):
    x = lib.tensor(lp, requires_grad=True)
    loss = lib.nn.functional.ctc_loss(x.log_softmax(-1), lib.tensor(targets),
                                      lib.tensor(in_lens), lib.tensor(tgt_lens), **kwargs)
    (loss.sum() if loss.dim() else loss).backward()
    return loss.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("case", ["plain", "repeats", "empty_target", "concatenated"])
def test_ctc_loss_matches_torch(reduction, case):
    lp, targets = _case(1, repeats=case == "repeats")
    in_lens, tgt_lens = [12, 10, 7], [4, 3, 2]
    if case == "empty_target":
        tgt_lens = [4, 0, 1]
    if case == "concatenated":
        targets = np.concatenate([targets[b, :tgt_lens[b]] for b in range(N)])
    got = _run(kiln, lp, targets, in_lens, tgt_lens, reduction=reduction)
    want = _run(torch, lp, targets, in_lens, tgt_lens, reduction=reduction)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_an_impossible_alignment_and_zero_infinity():
    lp, targets = _case(2)
    in_lens, tgt_lens = [12, 3, 7], [4, 4, 2]  # 3 frames cannot emit 4 labels
    for zero_infinity in (False, True):
        got, _ = _run(kiln, lp, targets, in_lens, tgt_lens, reduction="none",
                      zero_infinity=zero_infinity)
        want, _ = _run(torch, lp, targets, in_lens, tgt_lens, reduction="none",
                       zero_infinity=zero_infinity)
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_the_module_and_an_unbatched_input():
    lp, targets = _case(3)
    module = kiln.nn.CTCLoss(blank=0, reduction="sum")
    got = module(kiln.tensor(lp).log_softmax(-1), kiln.tensor(targets), [12, 10, 7], [4, 3, 2])
    want = torch.nn.CTCLoss(reduction="sum")(torch.tensor(lp).log_softmax(-1),
                                             torch.tensor(targets), [12, 10, 7], [4, 3, 2])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
    one = kiln.nn.functional.ctc_loss(kiln.tensor(lp[:, 0]).log_softmax(-1),
                                      kiln.tensor(targets[0]), [12], [4])
    ref = torch.nn.functional.ctc_loss(torch.tensor(lp[:, 0]).log_softmax(-1),
                                       torch.tensor(targets[0]), [12], [4])
    np.testing.assert_allclose(one.numpy(), ref.numpy(), rtol=1e-5)


def test_bad_targets_raise():
    lp, targets = _case(4)
    with pytest.raises(RuntimeError, match="out of range or the blank"):
        kiln.nn.functional.ctc_loss(kiln.tensor(lp), kiln.tensor(targets * 0), [12] * 3,
                                    [2] * 3)
    with pytest.raises(RuntimeError, match="input_lengths"):
        kiln.nn.functional.ctc_loss(kiln.tensor(lp), kiln.tensor(targets), [13] * 3, [2] * 3)
