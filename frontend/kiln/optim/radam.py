"""kiln.optim.RAdam (torch.optim.RAdam): Adam whose adaptive step is switched on only once the
variance of its second-moment estimate is tractable, and then scaled by a rectification term:

    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    rho_inf = 2 / (1 - beta2) - 1;  rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t)
    rho_t > 5:  p -= m / (1 - beta1**t) * lr * sqrt(1 - beta2**t) / (sqrt(v) + eps) * r_t
    otherwise:  p -= m / (1 - beta1**t) * lr      (plain momentum SGD for the first steps)

with r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)).
``decoupled_weight_decay=True`` decays the parameters (``p *= 1 - lr * wd``, RAdamW) instead
of adding ``wd * p`` to the gradient. Every option runs torch's single-tensor update op for op;
``foreach`` and ``capturable`` are accepted as Adamax's are (see kiln.optim.adamax).
"""

from __future__ import annotations

import kiln
from kiln.optim._single_tensor import _check_betas, _SingleTensorOptimizer
from kiln.optim.optimizer import _check_tensor_hyper, _new_step, _to_scalar

__all__ = ["RAdam"]


def _radam_update(param, grad, state, group):
    """One parameter's RAdam step, in torch's single-tensor order of operations."""
    lr = _to_scalar(group["lr"])  # a tensor lr stays one: torch scales by it as a tensor
    beta1, beta2 = group["betas"]
    weight_decay = group["weight_decay"]
    exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
    if group["maximize"]:
        grad = -grad
    step_t.add_(1)
    step = step_t.item()
    if weight_decay != 0:
        if group["decoupled_weight_decay"]:
            param.mul_(1 - lr * weight_decay)
        else:
            grad = grad.add(param, alpha=weight_decay)

    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    bias_corrected_exp_avg = exp_avg / bias_correction1

    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 * step * (beta2**step) / bias_correction2
    if rho_t > 5.0:
        rect = (
            (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
        ) ** 0.5
        exp_avg_sq_sqrt = exp_avg_sq.sqrt()
        if group["differentiable"]:
            exp_avg_sq_sqrt = exp_avg_sq_sqrt.add(group["eps"])
        else:
            exp_avg_sq_sqrt = exp_avg_sq_sqrt.add_(group["eps"])
        # torch evaluates ``number / tensor`` as ``tensor.reciprocal() * number``.
        adaptive_lr = exp_avg_sq_sqrt.reciprocal() * bias_correction2**0.5
        param.add_(bias_corrected_exp_avg * lr * adaptive_lr * rect, alpha=-1.0)
    else:
        param.add_(bias_corrected_exp_avg * lr, alpha=-1.0)


class RAdam(_SingleTensorOptimizer):
    """RAdam / RAdamW (see the module docstring for the update)."""

    _update = staticmethod(_radam_update)
    _group_defaults = (
        ("foreach", None),
        ("maximize", False),
        ("differentiable", False),
        ("decoupled_weight_decay", False),
        ("capturable", False),
    )

    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        decoupled_weight_decay=False,
        *,
        foreach=None,
        maximize=False,
        capturable=False,
        differentiable=False,
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
            "maximize": maximize,
            "foreach": foreach,
            "capturable": capturable,
            "decoupled_weight_decay": decoupled_weight_decay,
            "differentiable": differentiable,
        }
        super().__init__(params, defaults)

    def _init_state(self, p, group):
        """Lazily creates a parameter's state the first time it has a gradient."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = _new_step()
            state["exp_avg"] = kiln.zeros_like(p)
            state["exp_avg_sq"] = kiln.zeros_like(p)
        return state
