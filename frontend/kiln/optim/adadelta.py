"""kiln.optim.Adadelta (torch.optim.Adadelta): a per-coordinate step size from the ratio of
running RMS of past updates to running RMS of gradients, so ``lr`` only scales it (default 1):

    v = rho * v + (1 - rho) * g * g
    delta = sqrt(u + eps) / sqrt(v + eps) * g
    u = rho * u + (1 - rho) * delta * delta;  p -= lr * delta

Every option runs torch's single-tensor update op for op; ``foreach`` and ``capturable`` are
accepted as Adamax's are (see kiln.optim.adamax).
"""

from __future__ import annotations

import kiln
from kiln.optim._single_tensor import _SingleTensorOptimizer
from kiln.optim.optimizer import _check_tensor_hyper, _get_value, _new_step, _to_scalar

__all__ = ["Adadelta"]


def _adadelta_update(param, grad, state, group):
    """One parameter's Adadelta step, in torch's single-tensor order of operations."""
    lr = _get_value(_to_scalar(group["lr"]))
    rho, eps = group["rho"], group["eps"]
    square_avg, acc_delta = state["square_avg"], state["acc_delta"]
    state["step"].add_(1)
    if group["maximize"]:
        grad = -grad
    if group["weight_decay"] != 0:
        grad = grad.add(param, alpha=group["weight_decay"])
    square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
    std = square_avg.add(eps).sqrt_()
    delta = acc_delta.add(eps).sqrt_()
    if group["differentiable"]:
        delta = delta.clone()
    delta.div_(std).mul_(grad)
    acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
    param.add_(delta, alpha=-lr)


class Adadelta(_SingleTensorOptimizer):
    """Adadelta (see the module docstring for the update)."""

    _update = staticmethod(_adadelta_update)

    def __init__(
        self,
        params,
        lr=1.0,
        rho=0.9,
        eps=1e-6,
        weight_decay=0,
        foreach=None,
        *,
        capturable=False,
        maximize=False,
        differentiable=False,
    ) -> None:
        _check_tensor_hyper("lr", lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {
            "lr": lr,
            "rho": rho,
            "eps": eps,
            "weight_decay": weight_decay,
            "maximize": maximize,
            "capturable": capturable,
            "foreach": foreach,
            "differentiable": differentiable,
        }
        super().__init__(params, defaults)

    def _init_state(self, p, group):
        """Lazily creates a parameter's state the first time it has a gradient."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = _new_step()
            state["square_avg"] = kiln.zeros_like(p)
            state["acc_delta"] = kiln.zeros_like(p)
        return state
