"""kiln.optim.NAdam (torch.optim.NAdam): Adam with Nesterov momentum, whose momentum
coefficient warms up over steps (``momentum_decay``):

    mu_t = beta1 * (1 - 0.5 * 0.96**(t * momentum_decay));  prod_t = mu_1 * ... * mu_t
    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    denom = sqrt(v / (1 - beta2**t)) + eps
    p += (-lr * (1 - mu_t) / (1 - prod_t)) * g / denom
    p += (-lr * mu_{t+1} / (1 - prod_t * mu_{t+1})) * m / denom

``decoupled_weight_decay=True`` decays the parameters (``p *= 1 - lr * wd``, NAdamW) instead of
adding ``wd * p`` to the gradient. The running product ``mu_product`` is a 0-d tensor of the
``step`` dtype, as torch keeps it, so its float32 rounding is torch's too. Every option runs
torch's single-tensor update op for op (``differentiable=True`` its tensor-valued variant);
``foreach`` and ``capturable`` are accepted as Adamax's are (see kiln.optim.adamax).
"""

from __future__ import annotations

import kiln
from kiln.optim._single_tensor import _check_betas, _SingleTensorOptimizer
from kiln.optim.optimizer import _check_tensor_hyper, _get_value, _new_step, _to_scalar

__all__ = ["NAdam"]


def _over(num, den):
    """``num / den`` for a tensor ``den`` as torch rounds it: a number over a tensor is
    ``den.reciprocal() * num`` there (Tensor.__rtruediv__), two roundings, not one."""
    if isinstance(num, kiln.Tensor):
        return num / den
    return den.reciprocal() * num


def _nadam_update(param, grad, state, group):
    """One parameter's NAdam step, in torch's single-tensor order of operations."""
    lr = _to_scalar(group["lr"])  # a tensor lr stays one: torch computes with it in its dtype
    beta1, beta2 = group["betas"]
    weight_decay, momentum_decay = group["weight_decay"], group["momentum_decay"]
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    mu_product, step_t = state["mu_product"], state["step"]
    if group["maximize"]:
        grad = -grad
    step_t.add_(1)
    step = step_t.item()
    bias_correction2 = 1 - beta2**step
    if weight_decay != 0:
        if group["decoupled_weight_decay"]:
            param.mul_(1 - lr * weight_decay)
        else:
            grad = grad.add(param, alpha=weight_decay)

    mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
    mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
    mu_product.mul_(mu)

    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = exp_avg_sq.div(bias_correction2).sqrt()

    if group["differentiable"]:
        # torch's autograd-friendly variant: the coefficients stay tensors and scale the
        # operands, which rounds differently from the scalar ``value`` form below.
        denom = denom.add(group["eps"])
        mu_product_next = mu_product * mu_next
        grad = grad * _over(-lr * (1.0 - mu), 1.0 - mu_product)
        exp_avg = exp_avg * _over(-lr * mu_next, 1.0 - mu_product_next)
        param.addcdiv_(grad, denom)
        param.addcdiv_(exp_avg, denom)
    else:
        mu_product_value = mu_product.item()
        mu_product_next = mu_product_value * mu_next
        denom.add_(group["eps"])
        param.addcdiv_(grad, denom, value=_get_value(-lr * (1.0 - mu) / (1.0 - mu_product_value)))
        param.addcdiv_(exp_avg, denom, value=_get_value((-lr * mu_next) / (1.0 - mu_product_next)))


class NAdam(_SingleTensorOptimizer):
    """NAdam / NAdamW (see the module docstring for the update)."""

    _update = staticmethod(_nadam_update)
    _group_defaults = (
        ("maximize", False),
        ("foreach", None),
        ("capturable", False),
        ("differentiable", False),
        ("decoupled_weight_decay", False),
    )
    _step_keys = ("step", "mu_product")

    def __init__(
        self,
        params,
        lr=2e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0,
        momentum_decay=4e-3,
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
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "momentum_decay": momentum_decay,
            "decoupled_weight_decay": decoupled_weight_decay,
            "maximize": maximize,
            "foreach": foreach,
            "capturable": capturable,
            "differentiable": differentiable,
        }
        super().__init__(params, defaults)

    def _init_state(self, p, group):
        """Lazily creates a parameter's state the first time it has a gradient."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = _new_step()
            state["mu_product"] = _new_step().fill_(1.0)
            state["exp_avg"] = kiln.zeros_like(p)
            state["exp_avg_sq"] = kiln.zeros_like(p)
        return state
