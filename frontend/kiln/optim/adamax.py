"""kiln.optim.Adamax (torch.optim.Adamax): Adam with the infinity norm in place of the second
moment, so the denominator needs no bias correction and no square root:

    m = lerp(m, g, 1 - beta1);  u = max(beta2 * u, |g| + eps)
    p += (-lr / (1 - beta1**t) * m) / u

Every option runs torch's single-tensor update op for op (float64 results are torch's bit for
bit). ``foreach`` is accepted and stored: there is no group kernel for Adamax, and torch's own
foreach path is the same arithmetic over lists. ``capturable`` is accepted and runs the same
update (torch refuses it for CPU tensors; kiln has no graph capture to guard).
"""

from __future__ import annotations

import kiln
from kiln.optim._single_tensor import _check_betas, _SingleTensorOptimizer
from kiln.optim.optimizer import _check_tensor_hyper, _get_value, _new_step, _to_scalar

__all__ = ["Adamax"]


def _adamax_update(param, grad, state, group):
    """One parameter's Adamax step, in torch's single-tensor order of operations."""
    lr = _to_scalar(group["lr"])  # a tensor lr stays one: torch computes clr in its dtype
    beta1, beta2 = group["betas"]
    exp_avg, exp_inf, step_t = state["exp_avg"], state["exp_inf"], state["step"]
    if group["maximize"]:
        grad = -grad
    step_t.add_(1)
    if group["weight_decay"] != 0:
        grad = grad.add(param, alpha=group["weight_decay"])
    exp_avg.lerp_(grad, 1 - beta1)
    exp_inf.mul_(beta2)
    exp_inf.copy_(kiln.maximum(exp_inf, grad.abs().add_(group["eps"])))
    clr = lr / (1 - beta1 ** step_t.item())
    param.addcdiv_(exp_avg, exp_inf, value=-_get_value(clr))


class Adamax(_SingleTensorOptimizer):
    """Adamax (see the module docstring for the update)."""

    _update = staticmethod(_adamax_update)

    def __init__(
        self,
        params,
        lr=2e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        foreach=None,
        *,
        maximize=False,
        differentiable=False,
        capturable=False,
    ) -> None:
        _check_tensor_hyper("lr", lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        _check_betas(betas)
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
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
            state["exp_avg"] = kiln.zeros_like(p)
            state["exp_inf"] = kiln.zeros_like(p)
        return state
