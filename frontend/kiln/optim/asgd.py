"""kiln.optim.ASGD (torch.optim.ASGD): SGD with a decaying step size ``eta`` and a running
(Polyak) average ``ax`` of the iterates, kept in the state for the caller to read:

    p *= 1 - lambd * eta;  p -= eta * g
    ax = p (while mu == 1), else ax += mu * (p - ax)
    eta = lr / (1 + lambd * lr * t)**alpha;  mu = 1 / max(1, t - t0)

``eta`` and ``mu`` are 0-d tensors of the ``step`` dtype, as torch keeps them, so their
float32 rounding is torch's too. Every option runs torch's single-tensor update op for op;
``foreach`` and ``capturable`` are accepted as Adamax's are (see kiln.optim.adamax).
"""

from __future__ import annotations

import kiln
from kiln.optim._single_tensor import _SingleTensorOptimizer
from kiln.optim.optimizer import _check_tensor_hyper, _new_step, _scalar_dtype, _to_scalar

__all__ = ["ASGD"]


def _as_scalar_tensor(value):
    """torch.as_tensor of a step-size result: a number becomes a default-dtype 0-d tensor
    (rounded once there, then again by copy_ if the state's dtype differs)."""
    return value if isinstance(value, kiln.Tensor) else kiln.tensor(value)


def _asgd_update(param, grad, state, group):
    """One parameter's ASGD step, in torch's single-tensor order of operations."""
    lr = _to_scalar(group["lr"])  # a tensor lr stays one: torch computes eta in its dtype
    lambd, alpha, t0 = group["lambd"], group["alpha"], group["t0"]
    mu, ax, eta, step_t = state["mu"], state["ax"], state["eta"], state["step"]
    if group["maximize"]:
        grad = -grad
    step_t.add_(1)
    if group["weight_decay"] != 0:
        grad = grad.add(param, alpha=group["weight_decay"])
    eta_value = eta.item()
    param.mul_(1 - lambd * eta_value)
    param.add_(grad, alpha=-eta_value)
    if mu.item() != 1:
        ax.add_(param.sub(ax).mul_(mu))
    else:
        ax.copy_(param)
    step = step_t.item()
    eta.copy_(_as_scalar_tensor(lr / ((1 + lambd * lr * step) ** alpha)))
    mu.copy_(_as_scalar_tensor(1 / max(1, step - t0)))


class ASGD(_SingleTensorOptimizer):
    """Averaged SGD (see the module docstring for the update)."""

    _update = staticmethod(_asgd_update)
    _step_keys = ("step", "eta", "mu")

    def __init__(
        self,
        params,
        lr=1e-2,
        lambd=1e-4,
        alpha=0.75,
        t0=1e6,
        weight_decay=0,
        foreach=None,
        maximize=False,
        differentiable=False,
        capturable=False,
    ) -> None:
        _check_tensor_hyper("lr", lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {
            "lr": lr,
            "lambd": lambd,
            "alpha": alpha,
            "t0": t0,
            "weight_decay": weight_decay,
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
            lr = _to_scalar(group["lr"])
            if isinstance(lr, kiln.Tensor):
                state["eta"] = lr.detach().to(dtype=_scalar_dtype()).clone()
            else:
                state["eta"] = kiln.tensor(lr, dtype=_scalar_dtype())
            state["mu"] = _new_step().fill_(1.0)
            state["ax"] = kiln.zeros_like(p)
        return state
