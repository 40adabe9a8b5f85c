"""kiln.optim.swa_utils: weight averaging (torch.optim.swa_utils).

``AveragedModel`` keeps a running average of a model's weights (SWA's equal weights by default,
EMA with ``get_ema_multi_avg_fn``/``get_ema_avg_fn``), ``SWALR`` anneals the learning rate to a
constant for the averaging phase, and ``update_bn`` recomputes BatchNorm statistics for the
averaged weights. The arithmetic is torch's CPU path, operation for operation (the default
average is ``avg + (p - avg) / (n + 1)`` per tensor, the EMA a lerp), so the averages equal
torch's.
"""

from __future__ import annotations

import itertools
import math
import warnings
from copy import deepcopy
from typing import Any

import kiln
from kiln.nn import Module
from kiln.nn.modules.batchnorm import _BatchNorm
from kiln.optim._lr_scheduler_base import LRScheduler, _format_param

__all__ = [
    "SWALR",
    "AveragedModel",
    "get_ema_avg_fn",
    "get_ema_multi_avg_fn",
    "get_swa_avg_fn",
    "get_swa_multi_avg_fn",
    "update_bn",
]


def _check_decay(decay) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(
            f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


def get_ema_multi_avg_fn(decay=0.999):
    """In-place EMA over lists of tensors: ``ema.lerp_(p, 1 - decay)``."""
    _check_decay(decay)

    @kiln.no_grad()
    def ema_update(ema_param_list, current_param_list, _) -> None:
        if ema_param_list[0].is_floating_point():
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                p_ema.lerp_(p_model, 1 - decay)
        else:
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn():
    """In-place equal-weight average over lists of tensors."""

    @kiln.no_grad()
    def swa_update(averaged_param_list, current_param_list, num_averaged) -> None:
        if averaged_param_list[0].is_floating_point():
            weight = 1 / (num_averaged + 1)
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                p_avg.lerp_(p_model, weight)
        else:
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                diff = p_model - p_avg
                if isinstance(num_averaged, kiln.Tensor):
                    p_avg.addcdiv_(diff, num_averaged + 1)
                else:
                    p_avg.add_(diff, alpha=1.0 / (num_averaged + 1))

    return swa_update


def get_ema_avg_fn(decay=0.999):
    """EMA of one tensor: ``decay * ema + (1 - decay) * p``."""
    _check_decay(decay)

    @kiln.no_grad()
    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """Equal-weight average of one tensor: ``avg + (p - avg) / (n + 1)``."""

    @kiln.no_grad()
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


def _group_by_device_and_dtype(averaged: list, current: list) -> dict:
    """{(device, dtype): ([averaged...], [current...])}, in first-seen order."""
    groups: dict = {}
    for a, c in zip(averaged, current, strict=True):
        lists = groups.setdefault((a.device, a.dtype), ([], []))
        lists[0].append(a)
        lists[1].append(c)
    return groups


class AveragedModel(Module):
    """A copy of ``model`` whose parameters (and buffers, with ``use_buffers``) hold a running
    average of the ``model`` passed to each ``update_parameters`` call.

    The first call copies the weights; later ones apply ``avg_fn(avg, p, n_averaged)`` per
    tensor or ``multi_avg_fn(avgs, ps, n_averaged)`` per device and dtype (equal weights when
    neither is given). Without ``use_buffers`` the buffers are copied from ``model`` each time.
    """

    def __init__(self, model: Module, device=None, avg_fn=None, multi_avg_fn=None,
                 use_buffers=False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", kiln.tensor(0, dtype=kiln.long, device=device))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model: Module) -> None:
        self_param = (itertools.chain(self.module.parameters(), self.module.buffers())
                      if self.use_buffers else self.parameters())
        model_param = (itertools.chain(model.parameters(), model.buffers())
                       if self.use_buffers else model.parameters())
        self_param_detached: list = []
        model_param_detached: list = []
        copy_param = bool(self.n_averaged == 0)
        for p_averaged, p_model in zip(self_param, model_param, strict=False):
            p_model_ = p_model.detach().to(p_averaged.device)
            self_param_detached.append(p_averaged.detach())
            model_param_detached.append(p_model_)
            if copy_param:
                p_averaged.detach().copy_(p_model_)

        if self.n_averaged > 0:
            if self.multi_avg_fn is not None or self.avg_fn is None:
                groups = _group_by_device_and_dtype(self_param_detached, model_param_detached)
                for (device, _), (self_params, model_params) in groups.items():
                    n_averaged = self.n_averaged.to(device)
                    if self.multi_avg_fn:
                        self.multi_avg_fn(self_params, model_params, n_averaged)
                    else:  # torch's CPU path (its foreach lerp is for accelerators)
                        avg_fn = get_swa_avg_fn()
                        for p_averaged, p_model in zip(self_params, model_params, strict=True):
                            p_averaged.copy_(avg_fn(p_averaged, p_model, n_averaged))
            else:
                for p_averaged, p_model in zip(self_param_detached, model_param_detached,
                                               strict=True):
                    n_averaged = self.n_averaged.to(p_averaged.device)
                    p_averaged.detach().copy_(self.avg_fn(p_averaged.detach(), p_model,
                                                          n_averaged))

        if not self.use_buffers:
            # The buffers are not averaged: keep them in sync with the model's.
            for b_swa, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                b_swa.detach().copy_(b_model.detach().to(b_swa.device))
        self.n_averaged += 1


@kiln.no_grad()
def update_bn(loader, model: Module, device=None) -> None:
    """Recomputes the running statistics of ``model``'s BatchNorm layers with one pass over
    ``loader`` (batches are tensors, or lists/tuples whose first item is the input)."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None  # a cumulative average over the whole pass
    for input in loader:
        if isinstance(input, (list, tuple)):
            input = input[0]
        if device is not None:
            input = input.to(device)
        model(input)
    for bn_module in momenta:
        bn_module.momentum = momenta[bn_module]
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's lr to ``swa_lr`` over ``anneal_epochs`` steps ("cos" or "linear"),
    then holds it there."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos",
                 last_epoch=-1) -> None:
        swa_lrs = _format_param("swa_lr", optimizer, swa_lr)
        for swa_lr, group in zip(swa_lrs, optimizer.param_groups, strict=True):
            group["swa_lr"] = swa_lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use "
                          "`get_last_lr()`.", UserWarning, stacklevel=2)
        # The previous lr is recovered from the current one, so another scheduler may have
        # changed it in between (torch's chainable form).
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self.anneal_func(prev_t)
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
                    for group in self.optimizer.param_groups]
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self.anneal_func(t)
        return [group["swa_lr"] * alpha + lr * (1 - alpha)
                for group, lr in zip(self.optimizer.param_groups, prev_lrs, strict=True)]

    def _set_anneal_func(self, anneal_strategy) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = (self._cosine_anneal if anneal_strategy == "cos"
                            else self._linear_anneal)

    def state_dict(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items()
                if key not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
