"""``optimizer.step()`` inside compiled code: the update of every parameter captured into the
graph, so a training step's optimizer compiles with the code around it.

What the eager step does per parameter group in one C++ call is written here once more in kiln
ops, in torch's "capturable" form: the step counter stays a tensor and the bias corrections are
computed from it in the graph, so the graph does not change from one step to the next. The
parameters and their gradients are graph inputs fetched through the optimizer
(``opt.param_groups[g]['params'][i]`` and its ``.grad``); the optimizer state tensors are held
by the compiled entry (guarded by identity: ``load_state_dict`` replaces them and recompiles);
the hyperparameters are constants behind guards, and one that changes between calls becomes a
graph input (automatic dynamic): a scheduler's learning rate recompiles once, then not again. A
value the update branches on (``weight_decay != 0``, ``momentum``) recompiles when the branch
changes. The in-place updates are written back into the parameters and the state once, as
every mutation of a graph input is.

Captured: SGD (momentum, dampening, Nesterov, weight decay, maximize), Adam and AdamW (weight
decay either way, maximize, amsgrad), RMSprop (momentum, centered) and Adagrad (lr decay).
A state the first step creates is created at capture time for Adam, RMSprop and Adagrad (as the
first eager step would make it), and for SGD with momentum as a zero buffer (the first update
from zeros is the first gradient, which the first eager step copies); with dampening the first
eager step differs (it copies the gradient undampened), so that step runs eagerly and later
steps compile. Anything else
(a closure, step hooks, tensor hyperparameters, ``differentiable=True``, other optimizers)
breaks the graph with the reason.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import kiln
from kiln._capture import variables as V
from kiln._capture.sources import AttrSource, ItemSource, Source

__all__ = ["StateSource", "capture_step"]


@dataclass(frozen=True, eq=False)
class StateSource(Source):
    """``opt.state[param]`` (`key` None) or ``opt.state[param][key]``: the state dict is keyed by
    the parameter tensors, so the entry holds these tensors (expr None) and the guards read them
    with the parameter as the key."""

    base: Source  # opt.state
    param: object
    label: str  # how the parameter is named in texts: group and index
    key: str | None = None

    def name(self) -> str:
        item = "" if self.key is None else f"[{self.key!r}]"
        return f"{self.base.name()}[<{self.label}>]{item}"

    def guardable(self) -> bool:
        return self.base.guardable()

    def guard_node(self, node_of):
        node = node_of(self.base).item(self.param)
        return node if self.key is None else node.item(self.key)

    def __eq__(self, other) -> bool:
        return (isinstance(other, StateSource) and other.base == self.base
                and other.param is self.param and other.key == self.key)  # fmt: skip

    def __hash__(self) -> int:
        return hash((self.base, id(self.param), self.key))


_FLAGS = {  # group entries that must have these values for the captured update
    "differentiable": (False, None),
    "capturable": (False, True, None),
}


def capture_step(tx, opt_var: V.VT, args: list, kwargs: dict) -> V.VT:
    """Records ``opt.step()`` (see the module docstring); Unsupported for what it does not take."""
    from kiln.optim.optimizer import _global_post_hooks, _global_pre_hooks

    opt = opt_var.value
    kind = _kinds().get(type(opt))
    if kind is None and not isinstance(opt, kiln.optim.Optimizer):  # an LR scheduler
        raise V.Unsupported(f"{type(opt).__name__}.step() is not captured: a learning-rate "
                            "schedule runs eagerly (the compiled update reads each step's rate)",
                            "call the scheduler's step() outside the compiled function, or leave "
                            "it: the break costs one eager call")
    if kind is None:
        raise V.Unsupported(f"{type(opt).__name__}.step() is not captured (SGD, Adam, AdamW, "
                            "RMSprop and Adagrad are)",
                            "call this optimizer's step outside the compiled function")
    if args or kwargs:
        raise V.Unsupported("optimizer.step(closure) is not captured",
                            "call the closure, then step() without it")
    # what an LR scheduler's wrapper records (its order warning checks it on its first step,
    # which follows this capture): the step ran
    opt._opt_called = True
    if (opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks or _global_pre_hooks
            or _global_post_hooks):
        raise V.Unsupported("optimizer.step() with step hooks is not captured")
    source = opt_var.source
    if source is None or source.expr(tx.ctx.state_labels) is None:
        raise V.Unsupported("optimizer.step() of an optimizer the compiled code cannot fetch "
                            "(pass it as an argument or keep it in a global)")
    ctx = tx.ctx
    groups = AttrSource(source, "param_groups")
    ctx.guards.length(groups, len(opt.param_groups))
    state = AttrSource(source, "state")
    updates = []
    for gi, group in enumerate(opt.param_groups):
        gsrc = ItemSource(groups, gi)
        ctx.guards.dict_keys(gsrc, group.keys())
        ctx.guards.length(ItemSource(gsrc, "params"), len(group["params"]))
        for flag, allowed in _FLAGS.items():
            if group.get(flag) not in allowed:
                raise V.Unsupported(f"optimizer.step() of a group with {flag}={group[flag]!r}")
        for k in kind.hyper:
            values = group[k] if isinstance(group[k], tuple) else (group[k],)
            if any(isinstance(v, kiln.Tensor) for v in values):
                raise V.Unsupported(f"optimizer.step() with a tensor {k}")
        hyper = {k: ctx.wrap(group[k], ItemSource(gsrc, k)) for k in kind.hyper}
        for pi, p in enumerate(group["params"]):
            psrc = ItemSource(ItemSource(gsrc, "params"), pi)
            grad = ctx.wrap(p.grad, AttrSource(psrc, "grad"))
            if p.grad is None:
                continue
            param = ctx.wrap(p, psrc)
            label = f"param_groups[{gi}]['params'][{pi}]"
            tensors = kind.state(ctx, opt, p, group, state, label)
            updates.append((kind.update, [param, grad, *tensors], hyper))
    with _no_grad(ctx):
        for update, tensors, hyper in updates:
            tx.inline(V.FunctionVar(update), tensors, dict(hyper))
    return V.ConstVar(None)


def scheduled(tx, fn: V.VT) -> V.VT | None:
    """The optimizer behind ``opt.step`` when an LR scheduler has wrapped it (to note that the
    step ran): the optimizer's variable, its source the wrapper's owner; else None."""
    func = fn.fn
    if not getattr(func, "_wrapped_by_lr_sched", False) or not isinstance(fn.source, AttrSource):
        return None
    cells = [c.cell_contents for c in func.__closure__ or ()]
    opt = next((c() for c in cells if isinstance(c, weakref.ref)), None)
    if opt is None:
        return None
    opt._opt_called = True  # what the wrapper records: the step ran (for the order warning)
    return tx.ctx.wrap(opt, fn.source.base)


class _no_grad:
    """The update runs with grad mode off, as eager's step does."""

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self):
        self.saved = self.ctx.grad_enabled
        self.ctx.grad_enabled = False

    def __exit__(self, *exc):
        self.ctx.grad_enabled = self.saved


def _state_tensors(ctx, opt, p, state_source, label, keys):
    """The parameter's state tensors as graph inputs the entry holds, guarded by identity; the
    state dict's keys are guarded too (a load_state_dict that drops entries recompiles)."""
    entry = opt.state[p]
    ctx.guards.dict_keys(StateSource(state_source, p, label), entry.keys())
    out = []
    for k in keys:
        value = entry[k]
        if not isinstance(value, kiln.Tensor):
            raise V.Unsupported(f"optimizer state '{k}' that is not a tensor")
        out.append(ctx.wrap(value, StateSource(state_source, p, label, k)))
    return out


class _Adam:
    hyper = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize",
             "decoupled_weight_decay")  # fmt: skip

    @staticmethod
    def state(ctx, opt, p, group, state_source, label):
        with kiln.no_grad():
            opt._init_state(p, group)  # zeros, as the first eager step would make them
        keys = ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"]
                                                    else ())
        return _state_tensors(ctx, opt, p, state_source, label, keys)

    @staticmethod
    def update(param, grad, step, exp_avg, exp_avg_sq, *max_exp_avg_sq, lr, betas, eps,
               weight_decay, amsgrad, maximize, decoupled_weight_decay):
        """torch's single-tensor capturable Adam/AdamW update (the step counter a tensor); with
        amsgrad the denominator takes the running maximum of the second moment."""
        beta1, beta2 = betas
        if maximize:
            grad = -grad
        step.add_(1)
        if weight_decay != 0:
            if decoupled_weight_decay:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        if amsgrad:
            (running_max,) = max_exp_avg_sq
            running_max.copy_(kiln.maximum(running_max, exp_avg_sq))
            second = running_max
        else:
            second = exp_avg_sq
        denom = (second.sqrt() / bias_correction2.sqrt()).add_(eps)
        param.sub_(step_size * exp_avg / denom)


class _SGD:
    hyper = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize")

    @staticmethod
    def state(ctx, opt, p, group, state_source, label):
        if group["momentum"] == 0:
            return []
        entry = opt.state.get(p)
        if not entry or entry.get("momentum_buffer") is None:
            if group["dampening"] != 0:
                # The buffer starts as the undampened first gradient: that step runs eagerly.
                # The guard on the state's size makes the next call capture again.
                ctx.guards.length(state_source, len(opt.state))
                raise V.Unsupported("SGD's first step with momentum and dampening creates its "
                                    "buffers: it runs eagerly, and later steps compile")
            # Without dampening, the first step from a zero buffer is the eager first step's
            # (momentum * 0 + grad is the gradient, exactly), so the buffer starts as zeros.
            with kiln.no_grad():
                opt.state[p]["momentum_buffer"] = kiln.zeros_like(
                    p, memory_format=kiln.preserve_format)
        return _state_tensors(ctx, opt, p, state_source, label, ("momentum_buffer",))

    @staticmethod
    def update(param, grad, *buffer, lr, momentum, dampening, weight_decay, nesterov, maximize):
        """torch's single-tensor SGD update, after the first step."""
        if maximize:
            grad = -grad
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        if momentum != 0:
            (buf,) = buffer
            buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            grad = grad.add(buf, alpha=momentum) if nesterov else buf
        param.sub_(grad * lr)


class _RMSprop:
    hyper = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize")

    @staticmethod
    def state(ctx, opt, p, group, state_source, label):
        with kiln.no_grad():
            opt._init_state(p, group)  # zeros, as the first eager step would make them
        keys = ["step", "square_avg"] + (["momentum_buffer"] if group["momentum"] > 0 else []) + (
            ["grad_avg"] if group["centered"] else [])
        return _state_tensors(ctx, opt, p, state_source, label, keys)

    @staticmethod
    def update(param, grad, step, square_avg, *rest, lr, alpha, eps, weight_decay, momentum,
               centered, maximize):
        """torch's single-tensor RMSprop update."""
        buf = rest[0] if momentum > 0 else None
        grad_avg = rest[-1] if centered else None
        if maximize:
            grad = -grad
        step.add_(1)
        if weight_decay != 0:
            grad = grad + param * weight_decay
        square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        if centered:
            grad_avg.lerp_(grad, 1 - alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
        else:
            avg = square_avg.sqrt()
        avg = avg.add_(eps)
        if momentum > 0:
            buf.mul_(momentum).addcdiv_(grad, avg)
            param.sub_(buf * lr)
        else:
            param.sub_(grad / avg * lr)


class _Adagrad:
    hyper = ("lr", "lr_decay", "eps", "weight_decay", "maximize")

    @staticmethod
    def state(ctx, opt, p, group, state_source, label):
        with kiln.no_grad():
            opt._init_state(p, group)
        return _state_tensors(ctx, opt, p, state_source, label, ("step", "sum"))

    @staticmethod
    def update(param, grad, step, state_sum, lr, lr_decay, eps, weight_decay, maximize):
        """torch's single-tensor Adagrad update, the step counter a tensor."""
        step.add_(1)
        if maximize:
            grad = -grad
        if weight_decay != 0:
            grad = grad + param * weight_decay
        clr = lr / (1 + (step - 1) * lr_decay)
        state_sum.addcmul_(grad, grad, value=1)
        std = state_sum.sqrt().add_(eps)
        param.sub_(grad / std * clr)


@functools.cache
def _kinds() -> dict:
    from kiln.optim import SGD, Adagrad, Adam, AdamW, RMSprop

    return {SGD: _SGD, Adam: _Adam, AdamW: _Adam, RMSprop: _RMSprop, Adagrad: _Adagrad}
