"""kiln.optim.Adagrad (torch.optim.Adagrad), dense gradients.

By default (``foreach=None``) and with ``foreach=True`` or ``fused=True``, a group's dense
float32/float64 parameters update in one C++ call (``kiln._C._adagrad_multi_step_``), rounding
as the single-tensor update does; ``foreach=False`` and ``differentiable=True`` follow torch's
single-tensor update op for op:

    clr = lr / (1 + (t - 1) * lr_decay);  sum += g * g;  p += (-clr * g) / (sqrt(sum) + eps)

As in torch, the state (``step`` and ``sum`` filled with ``initial_accumulator_value``) is
created for every parameter when the optimizer is built, so a state dict lists parameters
that never had a gradient too.
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

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """Adagrad (see the module docstring for which update each option runs)."""

    def __init__(
        self,
        params,
        lr=1e-2,
        lr_decay=0,
        weight_decay=0,
        initial_accumulator_value=0,
        eps=1e-10,
        foreach=None,
        *,
        maximize=False,
        differentiable=False,
        fused=None,
    ) -> None:
        _check_tensor_hyper("lr", lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(
                f"Invalid initial_accumulator_value value: {initial_accumulator_value}"
            )
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "eps": eps,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "foreach": foreach,
            "maximize": maximize,
            "differentiable": differentiable,
            "fused": fused,
        }
        super().__init__(params, defaults)
        if fused:
            if differentiable:
                raise RuntimeError("`fused` does not support `differentiable`")
            if foreach:
                raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = _new_step(group["fused"])
                state["sum"] = kiln.full_like(p, initial_accumulator_value)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)
            group.setdefault("maximize", False)
            group.setdefault("differentiable", False)
            fused = group.setdefault("fused", None)
            for p in group["params"]:
                p_state = self.state.get(p, [])
                if len(p_state) != 0 and not isinstance(p_state["step"], kiln.Tensor):
                    step = _new_step(fused)
                    step.fill_(float(p_state["step"]))
                    p_state["step"] = step

    def share_memory(self) -> None:
        """Kept for torch compatibility: kiln tensors are not shared across processes."""

    def _init_state(self, p, group):
        """State for a parameter added after construction (``add_param_group``)."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = _new_step(group["fused"])
            state["sum"] = kiln.full_like(p, self.defaults["initial_accumulator_value"])
        return state

    @_use_grad_for_differentiable
    def step(self, closure=None):
        """Performs one Adagrad update of every parameter that has a gradient."""
        return self._step_each(closure, _adagrad_update, _group_update)


def _group_update(pairs, group):
    """The default / foreach / fused step of the group's dense parameters in one C++ call
    (kiln._C._adagrad_multi_step_); returns the pairs left to the single-tensor update."""
    taken, rest = _group_step_pairs(pairs, group, ["sum"])
    if taken:
        kiln._C._adagrad_multi_step_(
            [p for p, _ in taken], [p.grad for p, _ in taken], [s["sum"] for _, s in taken],
            [s["step"] for _, s in taken], float(group["lr"]), float(group["lr_decay"]),
            float(group["eps"]), float(group["weight_decay"]), bool(group["maximize"]))
    return rest


def _adagrad_update(param, grad, state, group):
    """One parameter's Adagrad step, in torch's single-tensor order of operations."""
    lr = _to_scalar(group["lr"])  # a tensor lr stays one: torch computes clr in its dtype
    step_t, state_sum = state["step"], state["sum"]
    step_t.add_(1)
    step = step_t.item()
    if group["maximize"]:
        grad = -grad
    if group["weight_decay"] != 0:
        grad = grad.add(param, alpha=group["weight_decay"])
    clr = lr / (1 + (step - 1) * group["lr_decay"])
    state_sum.addcmul_(grad, grad, value=1)
    std = state_sum.sqrt().add_(group["eps"])
    param.addcdiv_(grad, std, value=-_get_value(clr))
