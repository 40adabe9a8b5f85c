"""F.ctc_loss: the connectionist temporal classification loss (speech and handwriting models),
written in kiln ops so autograd differentiates it.

The forward (alpha) recursion of Graves et al. runs over the blank-interleaved target
`blank, l1, blank, l2, ..., blank` of each sample, in log space, for all samples at once: at
each time step a position takes its own log-probability plus the log-sum-exp of itself, the
position before and, where the label differs from the one two back (and is not a blank), the
position two back. The loss of a sample is minus the log-sum-exp of the last two positions at
its last time step.
"""

from __future__ import annotations

import kiln

__all__ = ["ctc_loss"]

_NEG = -float("inf")


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """torch.nn.functional.ctc_loss: log_probs (T, N, C) (or (T, C) unbatched), targets (N, S)
    padded or 1-d concatenated, lengths as tensors or sequences of ints."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    unbatched = log_probs.dim() == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
        targets = targets.unsqueeze(0) if targets.dim() == 1 else targets
    if log_probs.dim() != 3:
        raise RuntimeError(f"ctc_loss: log_probs must be 2-d or 3-d, got {log_probs.dim()}-d")
    t_max, n, classes = log_probs.shape
    in_lens = [int(v) for v in _as_list(input_lengths, n, "input_lengths")]
    tgt_lens = [int(v) for v in _as_list(target_lengths, n, "target_lengths")]
    if any(v > t_max or v < 0 for v in in_lens):
        raise RuntimeError(f"ctc_loss: input_lengths must be in [0, {t_max}], got {in_lens}")
    rows = _target_rows(targets, tgt_lens, n)
    s_max = max(tgt_lens, default=0)
    width = 2 * s_max + 1
    # the extended labels, padded with blanks; which positions may skip two back
    ext = [[blank] * width for _ in range(n)]
    skip = [[False] * width for _ in range(n)]
    for b, labels in enumerate(rows):
        for k, label in enumerate(labels):
            if not 0 <= label < classes or label == blank:
                raise RuntimeError(f"ctc_loss: target label {label} is out of range or the blank")
            ext[b][2 * k + 1] = label
            skip[b][2 * k + 1] = k > 0 and labels[k - 1] != label
    device = log_probs.device
    ext_t = kiln.tensor(ext, dtype=kiln.int64, device=device)
    skip_t = kiln.tensor(skip, dtype=kiln.bool, device=device)
    valid = kiln.arange(width, device=device)[None, :] < kiln.tensor(
        [2 * s + 1 for s in tgt_lens], device=device)[:, None]
    emit = log_probs.gather(2, ext_t[None].expand(t_max, n, width))  # (T, N, width)
    neg = kiln.full((n, 1), _NEG, dtype=log_probs.dtype, device=device)
    start = kiln.arange(width, device=device)[None, :] < 2
    alpha = kiln.where(start & valid, emit[0], kiln.full_like(emit[0], _NEG))
    alphas = [alpha]
    for t in range(1, t_max):
        one = kiln.cat([neg, alpha[:, :-1]], 1)
        two = kiln.cat([neg, neg, alpha[:, :-2]], 1) if width > 2 else kiln.full_like(alpha, _NEG)
        two = kiln.where(skip_t, two, kiln.full_like(two, _NEG))
        alpha = _logsumexp(kiln.stack([alpha, one, two]), 0) + emit[t]
        alpha = kiln.where(valid, alpha, kiln.full_like(alpha, _NEG))
        alphas.append(alpha)
    losses = []
    for b in range(n):
        if in_lens[b] == 0:
            final = kiln.tensor(0.0 if tgt_lens[b] == 0 else _NEG, dtype=log_probs.dtype,
                                device=device)
        else:
            last = alphas[in_lens[b] - 1][b]
            end = 2 * tgt_lens[b]
            final = last[end] if end == 0 else _logsumexp(last[end - 1:end + 1], 0)
        losses.append(-final)
    loss = kiln.stack(losses)
    if zero_infinity:
        loss = kiln.where(kiln.isinf(loss), kiln.zeros_like(loss), loss)
    if reduction == "none":
        return loss[0] if unbatched else loss
    if reduction == "sum":
        return loss.sum()
    lengths = kiln.tensor(tgt_lens, dtype=loss.dtype, device=device).clamp(min=1)
    return (loss / lengths).mean()


def _logsumexp(x, dim):
    """logsumexp whose gradient is 0, not NaN, where every term is -inf (unreachable positions
    of the recursion)."""
    m = x.amax(dim)
    m = kiln.where(kiln.isinf(m), kiln.zeros_like(m), m).detach()
    total = (x - m.unsqueeze(dim)).exp().sum(dim)
    empty = total == 0
    safe = kiln.where(empty, kiln.ones_like(total), total)
    return kiln.where(empty, kiln.full_like(total, _NEG), m + safe.log())


def _as_list(lengths, n, name):
    values = lengths.tolist() if isinstance(lengths, kiln.Tensor) else list(lengths)
    if len(values) != n:
        raise RuntimeError(f"ctc_loss: {name} must have one entry per batch element ({n}), "
                           f"got {len(values)}")
    return values


def _target_rows(targets, tgt_lens, n):
    """Each sample's labels, from padded (N, S) or concatenated 1-d targets."""
    flat = targets.tolist()
    if targets.dim() == 2:
        if any(length > targets.shape[1] for length in tgt_lens):
            raise RuntimeError("ctc_loss: a target length exceeds the targets' width")
        return [flat[b][:tgt_lens[b]] for b in range(n)]
    if sum(tgt_lens) > len(flat):
        raise RuntimeError("ctc_loss: the target lengths exceed the concatenated targets")
    rows, at = [], 0
    for length in tgt_lens:
        rows.append(flat[at:at + length])
        at += length
    return rows
