"""kiln.optim.RMSprop (torch.optim.RMSprop): centered and momentum variants included.

By default (``foreach=None``) and with ``foreach=True``, a group's dense float32/float64
parameters update in one C++ call (``kiln._C._rmsprop_multi_step_``), rounding as the
single-tensor update does; ``foreach=False`` and ``differentiable=True`` follow torch's
single-tensor update op for op:

    v = alpha * v + (1 - alpha) * g * g
    avg = sqrt(v - gavg * gavg) (centered, gavg = lerp(gavg, g, 1 - alpha)) or sqrt(v); += eps
    buf = momentum * buf + g / avg;  p -= lr * buf      (momentum > 0)
    p += (-lr * g) / avg                                  (otherwise)
"""

from __future__ import annotations

import kiln
from kiln.optim.optimizer import (
    Optimizer,
    _check_tensor_hyper,
    _get_value,
    _group_step_pairs,
    _new_step,
    _to_scalar,
    _use_grad_for_differentiable,
)

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop; ``capturable`` is accepted and runs the same update."""

    def __init__(
        self,
        params,
        lr=1e-2,
        alpha=0.99,
        eps=1e-8,
        weight_decay=0,
        momentum=0,
        centered=False,
        capturable=False,
        foreach=None,
        maximize=False,
        differentiable=False,
    ) -> None:
        _check_tensor_hyper("lr", lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "alpha": alpha,
            "eps": eps,
            "centered": centered,
            "weight_decay": weight_decay,
            "capturable": capturable,
            "foreach": foreach,
            "maximize": maximize,
            "differentiable": differentiable,
        }
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("momentum", 0)
            group.setdefault("centered", False)
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)
            group.setdefault("differentiable", False)
            group.setdefault("capturable", False)
            for p in group["params"]:
                p_state = self.state.get(p, [])
                if len(p_state) != 0 and not isinstance(p_state["step"], kiln.Tensor):
                    step = _new_step()
                    step.fill_(float(p_state["step"]))
                    p_state["step"] = step

    def _init_state(self, p, group):
        """Lazily creates a parameter's state the first time it has a gradient."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = _new_step()
            state["square_avg"] = kiln.zeros_like(p)
            if group["momentum"] > 0:
                state["momentum_buffer"] = kiln.zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = kiln.zeros_like(p)
        return state

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Performs one RMSprop update of every parameter that has a gradient."""
        return self._step_each(closure, _rmsprop_update, _group_update)


def _group_update(pairs, group):
    """The default / foreach step of the group's dense parameters in one C++ call
    (kiln._C._rmsprop_multi_step_); returns the pairs left to the single-tensor update."""
    keys = ["square_avg"] + (["grad_avg"] if group["centered"] else []) + (
        ["momentum_buffer"] if group["momentum"] > 0 else [])
    taken, rest = _group_step_pairs(pairs, group, keys)
    if taken:
        states = [s for _, s in taken]
        kiln._C._rmsprop_multi_step_(
            [p for p, _ in taken], [p.grad for p, _ in taken], [s["square_avg"] for s in states],
            [s["grad_avg"] for s in states] if group["centered"] else None,
            [s["momentum_buffer"] for s in states] if group["momentum"] > 0 else None,
            [s["step"] for s in states], float(group["lr"]), float(group["alpha"]),
            float(group["eps"]), float(group["weight_decay"]), float(group["momentum"]),
            bool(group["centered"]), bool(group["maximize"]))  # fmt: skip
    return rest


def _rmsprop_update(param, grad, state, group):
    """One parameter's RMSprop step, in torch's single-tensor order of operations."""
    lr = _get_value(_to_scalar(group["lr"]))
    alpha, eps = group["alpha"], group["eps"]
    weight_decay, momentum = group["weight_decay"], group["momentum"]
    if group["maximize"]:
        grad = -grad
    square_avg = state["square_avg"]
    state["step"].add_(1)
    if weight_decay != 0:
        grad = grad.add(param, alpha=weight_decay)
    square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
    if group["centered"]:
        grad_avg = state["grad_avg"]
        grad_avg.lerp_(grad, 1 - alpha)
        avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
    else:
        avg = square_avg.sqrt()
    avg = avg.add_(eps)
    if momentum > 0:
        buf = state["momentum_buffer"]
        buf.mul_(momentum).addcdiv_(grad, avg)
        param.add_(buf, alpha=-lr)
    else:
        param.addcdiv_(grad, avg, value=-lr)
