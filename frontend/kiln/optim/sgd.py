"""kiln.optim.SGD: stochastic gradient descent with momentum, dampening, Nesterov momentum,
weight decay and maximize (torch.optim.SGD).

The update: ``g += wd * p``; ``buf = g`` on the first step, else ``buf = momentum * buf +
(1 - dampening) * g``; ``g = g + momentum * buf`` (Nesterov) or ``g = buf``; ``p -= lr * g``.
By default (``foreach=None``), and with ``foreach=True`` or ``fused=True``, a parameter group's
dense float32/float64 parameters update in one C++ call (``kiln._C._sgd_multi_step_``: one pass
over each parameter, reading and writing every tensor once). ``foreach=False`` (and
``differentiable=True``) run torch's single-tensor implementation op for op, so float results
round as torch's do.
"""

from __future__ import annotations

import kiln
from kiln.optim.optimizer import (
    Optimizer,
    _check_tensor_hyper,
    _group_step_pairs,
    _to_scalar,
    _use_grad_for_differentiable,
)

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with (Nesterov) momentum.

    ``foreach=False`` is torch's for-loop update, bit for bit; the default, ``foreach=True``
    and ``fused=True`` run the same update fused per group (see the module docstring).
    """

    def __init__(
        self,
        params,
        lr=1e-3,
        momentum=0,
        dampening=0,
        weight_decay=0,
        nesterov=False,
        *,
        maximize=False,
        foreach=None,
        differentiable=False,
        fused=None,
    ) -> None:
        _check_tensor_hyper("lr", lr)
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
            "foreach": foreach,
            "differentiable": differentiable,
            "fused": fused,
        }
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)
        if fused:
            if differentiable:
                raise RuntimeError("`fused` does not support `differentiable`")
            if foreach:
                raise RuntimeError("`fused` and `foreach` cannot be `True` together.")

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("differentiable", False)
            group.setdefault("fused", False)

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Performs one SGD update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with kiln.enable_grad():
                loss = closure()
        for group in self.param_groups:
            momentum = group["momentum"]
            params = _group_update([p for p in group["params"] if p.grad is not None], group,
                                   self.state)  # fmt: skip
            for p in params:
                buf = self.state[p].get("momentum_buffer") if momentum != 0 else None
                buf = _sgd_update(p, p.grad, buf, group)
                if momentum != 0:
                    self.state[p]["momentum_buffer"] = buf
        return loss


def _group_update(params, group, state):
    """The fused step of every eligible parameter of the group in one C++ call; returns the
    parameters left to the single-tensor update."""
    momentum = group["momentum"]
    keys = ["momentum_buffer"] if momentum != 0 else []
    taken, rest = _group_step_pairs([(p, state.get(p, {})) for p in params], group, keys)
    if taken:
        fused = [p for p, _ in taken]
        new = kiln._C._sgd_multi_step_(
            fused, [p.grad for p in fused], [s.get("momentum_buffer") for _, s in taken],
            float(group["lr"]), float(momentum), float(group["dampening"]),
            float(group["weight_decay"]), bool(group["nesterov"]), bool(group["maximize"]))
        if momentum != 0:
            for p, buf in zip(fused, new, strict=True):
                state[p]["momentum_buffer"] = buf
    return [p for p, _ in rest]


def _sgd_update(param, grad, buf, group):
    """One parameter's update; returns the (new or updated) momentum buffer."""
    lr = _to_scalar(group["lr"])
    momentum, dampening = group["momentum"], group["dampening"]
    weight_decay = group["weight_decay"]
    if group["maximize"]:
        grad = -grad
    if weight_decay != 0:
        grad = grad.add(param, alpha=weight_decay)
    if momentum != 0:
        if buf is None:
            buf = grad.detach().clone()
        else:
            buf.mul_(momentum).add_(grad, alpha=1 - dampening)
        grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
    if isinstance(lr, kiln.Tensor):
        lr = lr.item()
    param.add_(grad, alpha=-lr)
    return buf
