"""Losses whose eager kernels are fused C++ loops (runtime/ops/loss_*.cc), decomposed into graph
ops for compiled code (decompose.py explains the mechanism): binary cross entropy on
probabilities and on logits, Huber, smooth L1 and KL divergence. Each follows its eager kernel's
formula, op for op, so compiled and eager results agree to rounding.

One difference from eager, as in torch.compile: eager ``binary_cross_entropy`` raises when a
probability lies outside [0, 1]; compiled code cannot check values without leaving the kernel,
so such an input gives NaN instead.
"""

from __future__ import annotations

from kiln._capture.decompose import Decline, decomposition
from kiln.nn._functional_composite import _legacy_reduction

_BCE = "kiln.nn.functional.binary_cross_entropy"
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # the top-level functions' reduction enum


def _same_shape(b, x, t, name: str) -> None:
    """Declines when the shapes differ where both are known (a symbolic size is checked by the
    elementwise ops' broadcast, as other binary ops are)."""
    xs, ts = b.sizes(x), b.sizes(t)
    if len(xs) != len(ts) or any(p != q and p.isdigit() and q.isdigit()
                                 for p, q in zip(xs, ts, strict=True)):  # fmt: skip
        raise Decline(f"{name} of different shapes (eager reports it)")


def _weighted(b, values, weight, out: str):
    """`values` times an optional weight broadcast into them, in the loss's dtype."""
    if weight is None:
        return values
    return b.cast(b.mul(values, b.tensor(weight)), out)


def _s_bce(input, target, weight=None, size_average=None, reduce=None, reduction="mean"): ...


@decomposition(_s_bce, _BCE)
def _binary_cross_entropy(b, input, target, weight, size_average, reduce, reduction):
    """(t - 1) * max(log1p(-x), -100) - t * max(log(x), -100) of x detached, plus (x -
    x.detach()) * (x - t) / max(x (1 - x), 1e-12): eager's formula (autograd/ops_loss.cc), whose
    gradient in x is torch's, finite where x is exactly 0 or 1."""
    x, t = b.float_tensor(input), b.float_tensor(target)
    _same_shape(b, x, t, "binary_cross_entropy")
    if b.dtype(x) != b.dtype(t):
        raise Decline("binary_cross_entropy of different dtypes (eager reports it)")
    xd = b.detach(x)
    log_x = _clamped_log(b, xd, of_one_minus=False)
    log_1mx = _clamped_log(b, xd, of_one_minus=True)
    values = b.sub(b.mul(b.sub(t, 1.0), log_1mx), b.mul(t, log_x))
    slope = b.detach(b.div(b.sub(xd, t), b.clamp(b.mul(xd, b.sub(1.0, xd)), min=1e-12)))
    values = b.add(values, b.mul(b.sub(x, xd), slope))
    values = _weighted(b, values, weight, b.dtype(x))
    return b.reduce(values, _legacy_reduction(size_average, reduce, reduction))


def _clamped_log(b, x, of_one_minus: bool):
    """max(log(x), -100), or max(log1p(-x), -100), with no NaN gradient where the log's argument
    is 0: the log reads a safe value there (a probability outside [0, 1] still gives NaN)."""
    nonzero = b.ne(x, 1.0) if of_one_minus else b.ne(x, 0.0)
    safe = b.where(nonzero, x, 0.0 if of_one_minus else 1.0)
    logged = b.log1p(b.neg(safe)) if of_one_minus else b.log(safe)
    return b.clamp(b.where(nonzero, logged, -100.0), min=-100.0)


def _s_bce_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                  pos_weight=None): ...  # fmt: skip


@decomposition(_s_bce_logits, "kiln.nn.functional.binary_cross_entropy_with_logits")
def _binary_cross_entropy_with_logits(b, input, target, weight, size_average, reduce,
                                      reduction, pos_weight):  # fmt: skip
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _bce_logits(b, input, target, weight, pos_weight, reduction)


def _s_bce_logits_enum(input, target, weight=None, pos_weight=None, reduction=1): ...


@decomposition(_s_bce_logits_enum, "kiln.binary_cross_entropy_with_logits")
def _binary_cross_entropy_with_logits_enum(b, input, target, weight, pos_weight, reduction):
    """torch.binary_cross_entropy_with_logits: the reduction as its enum."""
    return _bce_logits(b, input, target, weight, pos_weight, _enum(reduction))


def _enum(reduction) -> str:
    if type(reduction) is not int or reduction not in _REDUCTIONS:
        raise Decline(f"reduction {reduction!r}")
    return _REDUCTIONS[reduction]


def _bce_logits(b, input, target, weight, pos_weight, reduction: str):
    """(1 - t) * x + (1 + (pos_weight - 1) * t) * softplus(-x), softplus(-x) as -logsigmoid(x),
    eager's formula: one op whose derivative is right at x = 0 (written with abs and max, each
    with a zero derivative there, the slope at 0 would be -t, not 1/2 - t); the result has the
    target's dtype, as eager's."""
    x, t = b.float_tensor(input), b.float_tensor(target)
    _same_shape(b, x, t, "binary_cross_entropy_with_logits")
    if b.dtype(x) != b.dtype(t):
        raise Decline("binary_cross_entropy_with_logits of different dtypes")
    softplus_neg = b.neg(b.log_sigmoid(x))
    if pos_weight is not None:
        scale = b.add(b.mul(b.sub(b.tensor(pos_weight), 1.0), t), 1.0)
        softplus_neg = b.mul(scale, softplus_neg)
    values = b.cast(b.add(b.mul(b.sub(1.0, t), x), softplus_neg), b.dtype(t))
    values = _weighted(b, values, weight, b.dtype(t))
    return b.reduce(values, reduction)


def _s_huber(input, target, reduction="mean", delta=1.0, weight=None): ...


@decomposition(_s_huber, "kiln.nn.functional.huber_loss")
def _huber_loss(b, input, target, reduction, delta, weight):
    """0.5 z^2 below delta, delta (z - 0.5 delta) above, z = |x - y|."""
    x, y = b.float_tensor(input), b.float_tensor(target)
    d = float(b.number(delta, "delta"))
    if d <= 0:
        raise Decline("a non-positive delta (eager reports it)")
    z = b.abs(b.sub(x, y))
    values = b.where(b.lt(z, d), b.mul(b.mul(z, z), 0.5), b.mul(b.sub(z, 0.5 * d), d))
    values = b.cast(values, b.dtype(x))
    if weight is not None:
        values = b.mul(values, b.tensor(weight))
    return b.reduce(values, reduction)


def _s_smooth_l1(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0): ...


@decomposition(_s_smooth_l1, "kiln.nn.functional.smooth_l1_loss")
def _smooth_l1_loss(b, input, target, size_average, reduce, reduction, beta):
    """0.5 z^2 / beta below beta, z - 0.5 beta above (beta = 0: the L1 loss)."""
    x, y = b.float_tensor(input), b.float_tensor(target)
    beta = float(b.number(beta, "beta"))
    if beta < 0:
        raise Decline("a negative beta (eager reports it)")
    z = b.abs(b.sub(x, y))
    if beta > 0:
        z = b.where(b.lt(z, beta), b.div(b.mul(b.mul(z, z), 0.5), beta), b.sub(z, 0.5 * beta))
    return b.reduce(z, _legacy_reduction(size_average, reduce, reduction))


def _s_kl_div(input, target, size_average=None, reduce=None, reduction="mean",
              log_target=False): ...  # fmt: skip


@decomposition(_s_kl_div, "kiln.nn.functional.kl_div")
def _kl_div(b, input, target, size_average, reduce, reduction, log_target):
    return _kl(b, input, target, _legacy_reduction(size_average, reduce, reduction), log_target)


def _s_kl_div_enum(input, target, reduction=1, log_target=False): ...


@decomposition(_s_kl_div_enum, "kiln.kl_div")
def _kl_div_enum(b, input, target, reduction, log_target):
    """torch.kl_div: the reduction as its enum."""
    return _kl(b, input, target, _enum(reduction), log_target)


def _kl(b, input, target, reduction: str, log_target):
    """exp(t) (t - x) for log targets, else xlogy(t, t) - t x; 'batchmean' is the sum over the
    batch's rows averaged over the first dim. xlogy takes the log of 1 where t is 0, so its
    derivative there is finite (0 log 0 is 0, and so is its slope through the `where`)."""
    x, t = b.float_tensor(input), b.float_tensor(target)
    if log_target:
        values = b.mul(b.exp(t), b.sub(t, x))
    else:
        zero = b.eq(t, 0.0)
        xlogy = b.where(zero, 0.0, b.mul(t, b.log(b.where(zero, 1.0, t))))
        values = b.sub(xlogy, b.mul(t, x))
    if reduction != "batchmean":
        return b.reduce(values, reduction)
    rank = b.rank(values)
    if rank == 0:
        return values
    if rank > 1:
        values = b.sum(values, dim=list(range(1, rank)))
    return b.mean(values, dim=[0])
