"""kiln.optim.Rprop (torch.optim.Rprop): resilient backpropagation, which uses only the sign of
each gradient coordinate and adapts a per-coordinate step size from sign agreement:

    s = sign(g * prev):  step_size *= etaplus (s > 0), etaminus (s < 0), 1 (s == 0)
    step_size = clamp(step_size, *step_sizes)
    g = 0 where s < 0 (the step after a sign flip is skipped);  p -= sign(g) * step_size
    prev = g

``step_size`` starts at ``lr`` for every coordinate. Every option runs torch's single-tensor
update (its masked assignments written as ``where``, which selects the same values, NaNs
included); ``foreach`` and ``capturable`` are accepted as Adamax's are (see kiln.optim.adamax).
"""

from __future__ import annotations

import kiln
from kiln.optim._single_tensor import _SingleTensorOptimizer
from kiln.optim.optimizer import _check_tensor_hyper, _get_value, _new_step, _to_scalar

__all__ = ["Rprop"]


def _rprop_update(param, grad, state, group):
    """One parameter's Rprop step, in torch's single-tensor order of operations."""
    etaminus, etaplus = group["etas"]
    step_size_min, step_size_max = group["step_sizes"]
    prev, step_size = state["prev"], state["step_size"]
    if group["maximize"]:
        grad = -grad
    state["step"].add_(1)
    sign = grad.mul(prev.clone() if group["differentiable"] else prev).sign()
    # Masks from the raw signs: torch re-tests ``sign == etaminus`` after the replacement,
    # which picks the same coordinates since etaminus < 1 < etaplus.
    flipped = sign.lt(0)
    factor = kiln.where(sign.gt(0), etaplus, kiln.where(flipped, etaminus, sign))
    factor = kiln.where(sign.eq(0), 1.0, factor)
    step_size.mul_(factor).clamp_(step_size_min, step_size_max)
    grad = kiln.where(flipped, 0.0, grad)
    param.addcmul_(grad.sign(), step_size, value=-1)
    prev.copy_(grad)


class Rprop(_SingleTensorOptimizer):
    """Rprop (see the module docstring for the update)."""

    _update = staticmethod(_rprop_update)

    def __init__(
        self,
        params,
        lr=1e-2,
        etas=(0.5, 1.2),
        step_sizes=(1e-6, 50),
        *,
        capturable=False,
        foreach=None,
        maximize=False,
        differentiable=False,
    ) -> None:
        _check_tensor_hyper("lr", lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = {
            "lr": lr,
            "etas": etas,
            "step_sizes": step_sizes,
            "foreach": foreach,
            "maximize": maximize,
            "differentiable": differentiable,
            "capturable": capturable,
        }
        super().__init__(params, defaults)

    def _init_state(self, p, group):
        """Lazily creates a parameter's state the first time it has a gradient."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = _new_step()
            state["prev"] = kiln.zeros_like(p)
            state["step_size"] = kiln.full_like(p.grad, _get_value(_to_scalar(group["lr"])))
        return state
