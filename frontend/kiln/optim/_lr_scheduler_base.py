"""LRScheduler: the base of kiln.optim.lr_scheduler (torch.optim.lr_scheduler.LRScheduler).

The bookkeeping matches torch's so schedules step identically and state dicts hold the same
keys: construction records ``initial_lr`` in every param group and takes one initial step
(``last_epoch`` -1 -> 0); each ``step()`` advances ``last_epoch`` and writes ``get_lr()``
into the groups. Most schedules are chainable (they scale the group's current lr), so two
schedulers on one optimizer compose, as in torch.
"""

from __future__ import annotations

import warnings
from functools import wraps
from typing import Any
from weakref import ref

import kiln
from kiln.optim.optimizer import Optimizer, _to_scalar

__all__ = ["LRScheduler"]

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being "
    "deprecated where possible. Please use `scheduler.step()` to step the "
    "scheduler. During the deprecation, if epoch is different from None, the "
    "closed form is used instead of the new chainable form, where available. "
    "Please open an issue if you are unable to replicate your use case: "
    "https://github.com/pytorch/pytorch/issues/new/choose."
)


def _param_groups_val_list(optimizer, key: str) -> list[Any]:
    """``group[key]`` for every group; tensors are cloned so results never alias a group."""
    return [
        g[key].clone() if isinstance(g[key], kiln.Tensor) else g[key]
        for g in optimizer.param_groups
    ]


def _update_param_group_val(param_group, key: str, val) -> None:
    """Sets ``param_group[key]``; a tensor value is filled in place so it stays the same
    tensor (an optimizer may hold it)."""
    if isinstance(param_group[key], kiln.Tensor):
        param_group[key].fill_(_to_scalar(val))
    else:
        param_group[key] = val


def _format_param(name: str, optimizer, param) -> list[Any]:
    """One value per param group: a list/tuple is checked against the group count, a single
    value is repeated."""
    if isinstance(param, (list, tuple)):
        if len(param) != len(optimizer.param_groups):
            raise ValueError(
                f"{name} must have the same length as optimizer.param_groups. "
                f"{name} has {len(param)} values, param_groups has "
                f"{len(optimizer.param_groups)}."
            )
    else:
        param = [param] * len(optimizer.param_groups)
    return [p.clone() if isinstance(p, kiln.Tensor) else p for p in param]


def _warn_get_lr_called_within_step(scheduler) -> None:
    if not scheduler._get_lr_called_within_step:
        warnings.warn(
            "To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
            UserWarning,
            stacklevel=2,
        )


class _enable_get_lr_call:  # noqa: N801 - torch's name
    """Marks get_lr() as called by step() (so it does not warn)."""

    def __init__(self, o) -> None:
        self.o = o

    def __enter__(self):
        self.o._get_lr_called_within_step = True
        return self

    def __exit__(self, *exc) -> None:
        self.o._get_lr_called_within_step = False


class _initial_mode:  # noqa: N801 - torch's name
    """Marks the step taken by the constructor, which some schedules treat specially."""

    def __init__(self, o) -> None:
        self.o = o

    def __enter__(self):
        self.o._is_initial = True

    def __exit__(self, *exc) -> None:
        self.o._is_initial = False


class LRScheduler:
    """Base class of the learning-rate schedulers.

    Subclasses implement ``get_lr()`` (the next lr of every group, computed from
    ``last_epoch``) and may add ``_get_closed_form_lr()`` for ``step(epoch)``. Pass
    ``last_epoch`` other than -1 only when resuming: the groups must then already hold
    ``initial_lr``.
    """

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                initial_lr = group["lr"]
                if isinstance(initial_lr, kiln.Tensor):
                    initial_lr = initial_lr.clone()
                group.setdefault("initial_lr", initial_lr)
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when "
                        "resuming scheduler with last_epoch >= 0.\n"
                        "This typically happens when:\n"
                        "1. You're trying to resume training from a checkpoint but haven't "
                        "properly loaded the optimizer state\n"
                        "2. You're using last_epoch >= 0 for a fresh training run (not "
                        "recommended)"
                    )
        self.base_lrs: list[Any] = _param_groups_val_list(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        _track_optimizer_step(self.optimizer)
        self._initial_step()

    def _initial_step(self) -> None:
        """Resets the step count and takes the constructor's step."""
        self._step_count = 0
        with _initial_mode(self):
            self.step()

    def state_dict(self) -> dict[str, Any]:
        """Every attribute except the optimizer (torch's layout)."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores attributes saved by ``state_dict()``."""
        self.__dict__.update(state_dict)

    def get_last_lr(self) -> list[Any]:
        """The learning rates the last ``step()`` set, one per param group."""
        return self._last_lr

    def get_lr(self) -> list[Any]:
        """The next learning rate of every param group (called by ``step()``)."""
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        """Advances the schedule by one step (call it after ``optimizer.step()``)."""
        if self._step_count == 1:
            if not hasattr(self.optimizer.step, "_wrapped_by_lr_sched"):
                warnings.warn(
                    "Seems like `optimizer.step()` has been overridden after learning rate "
                    "scheduler initialization. Please, make sure to call `optimizer.step()` "
                    "before `lr_scheduler.step()`. See more details at "
                    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                    UserWarning,
                    stacklevel=2,
                )
            elif not getattr(self.optimizer, "_opt_called", False):
                warnings.warn(
                    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. "
                    "In PyTorch 1.1.0 and later, you should call them in the opposite order: "
                    "`optimizer.step()` before `lr_scheduler.step()`.  Failure to do this "
                    "will result in PyTorch skipping the first value of the learning rate "
                    "schedule. See more details at "
                    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
                    UserWarning,
                    stacklevel=2,
                )
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        with _enable_get_lr_call(self):
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                if hasattr(self, "_get_closed_form_lr"):
                    values = self._get_closed_form_lr()
                else:
                    values = self.get_lr()
        for param_group, lr in zip(self.optimizer.param_groups, values, strict=True):
            _update_param_group_val(param_group, "lr", lr)
        self._last_lr: list[Any] = _param_groups_val_list(self.optimizer, "lr")


def _track_optimizer_step(opt) -> None:
    """Wraps ``opt.step`` (once) to record that it ran, for the step-order warning."""
    if hasattr(opt.step, "_wrapped_by_lr_sched"):
        return
    opt_ref = ref(opt)
    func = opt.step.__func__

    @wraps(func)
    def wrapper(*args, **kwargs):
        o = opt_ref()
        o._opt_called = True
        return func.__get__(o, o.__class__)(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True
    opt.step = wrapper
