"""What kiln's single-tensor-only optimizers (Adamax, NAdam, RAdam, Adadelta, Rprop, ASGD) share:
they have no C++ group kernel, so each ``step`` is torch's single-tensor update applied to one
parameter at a time, and loading an old checkpoint fills in the same group flags and turns the
same numeric counters into tensors. Each optimizer module keeps its constructor, ``_init_state``
and its per-parameter update; ``_SingleTensorOptimizer`` supplies the rest.
"""

from __future__ import annotations

import kiln
from kiln.optim.optimizer import Optimizer, _new_step, _use_grad_for_differentiable


def _check_betas(betas):
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")


def _check_foreach_differentiable(group):
    """torch's foreach path refuses to be differentiated; the same error keeps scripts that
    rely on it (or on avoiding it) behaving alike."""
    if group["foreach"] and group["differentiable"]:
        raise AssertionError("_foreach ops don't support autograd")


def _step_to_tensor(state, keys=("step",)):
    """Old checkpoints kept counters as numbers; torch turns them into 0-d tensors on load."""
    for key in keys:
        if key in state and not isinstance(state[key], kiln.Tensor):
            value = _new_step()
            value.fill_(float(state[key]))
            state[key] = value


def _make_step(cls, update):
    """A ``step`` of ``cls`` that runs ``update`` on every parameter with a gradient.

    Built per class rather than inherited so that its name, module and docstring stay the
    optimizer's own: help() shows them, and the step-hook error message quotes the function.
    """

    def step(self, closure=None):
        for group in self.param_groups:
            _check_foreach_differentiable(group)
        return self._step_each(closure, update)

    step.__module__ = cls.__module__
    step.__qualname__ = f"{cls.__qualname__}.step"
    step.__doc__ = f"Performs one {cls.__name__} update of every parameter that has a gradient."
    return _use_grad_for_differentiable(step)


class _SingleTensorOptimizer(Optimizer):
    """Base of the optimizers that update one parameter at a time.

    A subclass sets ``_update`` (a staticmethod ``update(param, grad, state, group)``) and gets
    a ``step`` running it; ``_group_defaults`` lists, in the order they are filled in, the
    group entries an old checkpoint may lack, and ``_step_keys`` the state counters it may
    hold as numbers.
    """

    _group_defaults: tuple[tuple[str, object], ...] = (
        ("foreach", None),
        ("maximize", False),
        ("differentiable", False),
        ("capturable", False),
    )
    _step_keys: tuple[str, ...] = ("step",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Only a class that names its own update gets a new step: a user subclass of, say,
        # Adamax inherits Adamax.step (and any step it defines itself is left alone).
        if "_update" in cls.__dict__ and "step" not in cls.__dict__:
            cls.step = _make_step(cls, cls._update)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            for key, value in self._group_defaults:
                group.setdefault(key, value)
            for p in group["params"]:
                _step_to_tensor(self.state.get(p, {}), self._step_keys)
