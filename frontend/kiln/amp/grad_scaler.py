"""GradScaler: torch.amp.GradScaler's dynamic loss scaling."""

from __future__ import annotations

import math

import kiln


class GradScaler:
    """Multiplies the loss by a scale before backward; ``step`` unscales the gradients, skips
    the optimizer step when any is inf or NaN, and ``update`` halves the scale after such a step
    (``backoff_factor``) or doubles it after ``growth_interval`` clean steps. Disabled, every
    method passes through (``scale`` returns its argument, ``step`` calls ``optimizer.step``)."""

    def __init__(self, device="cuda", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):  # fmt: skip
        self._enabled = enabled
        self._scale, self._growth_factor = float(init_scale), growth_factor
        self._backoff_factor, self._growth_interval = backoff_factor, growth_interval
        self._growth_tracker = 0
        self._unscaled: dict = {}  # id(optimizer) -> found_inf

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        if not self._enabled:
            return outputs
        if isinstance(outputs, kiln.Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer) -> None:
        if not self._enabled:
            return
        if id(optimizer) in self._unscaled:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")  # fmt: skip
        inv, found_inf = 1.0 / self._scale, False
        with kiln.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    p.grad.mul_(inv)
                    if not bool(kiln.isfinite(p.grad).all()):
                        found_inf = True
        self._unscaled[id(optimizer)] = found_inf

    def step(self, optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        if self._unscaled[id(optimizer)]:
            return None  # inf/NaN gradients: this step is skipped
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, kiln.Tensor)
                                else new_scale)  # fmt: skip
        elif any(self._unscaled.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                grown = self._scale * self._growth_factor
                self._scale = grown if math.isfinite(grown) else self._scale
                self._growth_tracker = 0
        self._unscaled.clear()

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        if not self._enabled:
            return
        if not state:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")  # fmt: skip
        self._scale = float(state["scale"])
        self._growth_factor, self._backoff_factor = state["growth_factor"], state["backoff_factor"]
        self._growth_interval, self._growth_tracker = (
            state["growth_interval"],
            state["_growth_tracker"],
        )


# Inside compiled code, scale() is captured (a multiply by the current scale, a constant the
# entry guards); these read every gradient for infs and step the optimizer, so each runs
# eagerly at a graph break, once (kiln/_capture/calls.py, _EAGER_REASON).
for _fn in (GradScaler.unscale_, GradScaler.step, GradScaler.update):
    _fn._kiln_eager_reason = ("checks the gradients for infs and NaNs and steps or rescales "
                              "(a data-dependent decision)")
