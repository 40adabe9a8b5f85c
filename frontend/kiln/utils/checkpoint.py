"""kiln.utils.checkpoint: activation checkpointing (torch.utils.checkpoint).

``checkpoint(fn, *args)`` runs ``fn`` under no_grad, so none of its intermediate activations are
kept; it saves the tensor arguments (and the RNG state, so dropout draws the same masks again)
and, when the backward pass reaches the result, runs ``fn`` again with grad on those saved
inputs and backpropagates through that recomputation. It is a ``kiln.autograd.Function``: the
gradients of the inputs come back through the autograd engine, and so do those of the
parameters of ``fn`` when ``fn`` is a module or a module's bound method (``self.block``) and
``use_reentrant=False``. Any other leaf the recomputation reaches (parameters read through a
closure; every parameter with ``use_reentrant=True``, as torch's reentrant variant) has its
gradient accumulated into ``.grad`` during the backward, so ``kiln.autograd.grad`` does not see
those. Gradients equal the ones without checkpointing.

A non-leaf tensor ``fn`` reads through a closure is not an input of the node: the gradient
through it goes straight to the leaves of its history, accumulated as above.
Double backward (``create_graph=True``) through a checkpoint raises: the recomputation is a
graph of its own, detached from the inputs' history.

Under ``kiln.compile`` the capture sees ``_is_compiling()`` as True and ``checkpoint`` simply
calls ``fn``: the compiled graph (and its compiled backward) holds the block's ops like any
others, with no recomputation.
"""

from __future__ import annotations

import contextlib
import warnings

import kiln
from kiln.autograd.function import Function

__all__ = ["CheckpointError", "checkpoint", "checkpoint_sequential", "noop_context_fn"]


class CheckpointError(RuntimeError):
    """The recomputation did not produce what the forward did."""


def _is_compiling() -> bool:
    """False when it runs; kiln.compile's capture reads it as True (``_kiln_value_in_capture``,
    see _capture/calls.py)."""
    return False


_is_compiling._kiln_value_in_capture = True


def noop_context_fn():
    return contextlib.nullcontext(), contextlib.nullcontext()


def _reentrant_warning(name: str) -> str:
    return (f"kiln.utils.{name}: the use_reentrant parameter should be passed explicitly "
            "(torch raises without it from 2.9). use_reentrant=False is recommended; "
            "use_reentrant=True, the old default used now, is the reentrant variant.")


def checkpoint(function, *args, use_reentrant: bool | None = None,
               preserve_rng_state: bool = True, context_fn=noop_context_fn,
               determinism_check: str = "default", debug: bool = False,
               early_stop: bool = True, **kwargs):
    """``function(*args, **kwargs)``, its activations recomputed in the backward pass instead of
    kept (see the module doc)."""
    if _is_compiling():
        return function(*args, **kwargs)
    if use_reentrant is None:
        warnings.warn(_reentrant_warning("checkpoint"), stacklevel=2)
        use_reentrant = True
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if use_reentrant and (context_fn is not noop_context_fn or debug is not False):
        raise ValueError("Passing `context_fn` or `debug` is only supported when "
                         "use_reentrant=False.")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    params, complete = ([], True) if use_reentrant else _owned_parameters(function)
    return _run(function, args, kwargs, params, complete=complete,
                reentrant=use_reentrant, preserve_rng_state=preserve_rng_state,
                context_fn=context_fn, check=determinism_check == "default")


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Runs ``functions`` (a Sequential or a list of modules/functions) in ``segments`` chunks,
    checkpointing every chunk but the last."""
    if _is_compiling():
        for f in functions:
            input = f(input)
        return input
    if use_reentrant is None:
        warnings.warn(_reentrant_warning("checkpoint.checkpoint_sequential"), stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if isinstance(functions, kiln.nn.Sequential):
        functions = list(functions.children())

    def run_function(start, end):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x

        return forward

    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        params, complete = [], True
        if not use_reentrant:
            for f in functions[start:end + 1]:
                p, c = _owned_parameters(f)
                params += p
                complete = complete and c
        input = _run(run_function(start, end), (input,), {}, list(dict.fromkeys(params)),
                     complete=complete, reentrant=use_reentrant, preserve_rng_state=preserve,
                     context_fn=noop_context_fn, check=True)
    return run_function(end + 1, len(functions) - 1)(input)


def _owned_parameters(function) -> tuple[list, bool]:
    """The parameters needing grad of the module `function` is (or is a method of), and whether
    they are all the leaves it can reach that way (False: a plain function or closure)."""
    owner = function if isinstance(function, kiln.nn.Module) else getattr(function, "__self__",
                                                                          None)
    if isinstance(owner, kiln.nn.Module):
        return [p for p in owner.parameters() if p.requires_grad], True
    return [], False


class _State:
    """What the backward needs to run the function again."""

    def __init__(self, function, args, kwargs, preserve_rng_state, recompute_ctx, check):
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.rng = kiln.get_rng_state() if preserve_rng_state else None
        self.autocast = {d: kiln._C._autograd._autocast_region(d) for d in ("cpu", "cuda")}
        self.recompute_ctx = recompute_ctx
        self.check = check
        self.structure = None  # how to rebuild the result from its tensors
        self.metadata = None  # the forward's output shapes and dtypes, for the check


def _flatten(obj, leaves: list):
    """The tensors of `obj` (nested tuples, lists and dicts) appended to `leaves`, and a
    template for `_unflatten`."""
    if isinstance(obj, kiln.Tensor):
        leaves.append(obj)
        return _Slot(len(leaves) - 1)
    if isinstance(obj, (tuple, list)):
        items = [_flatten(o, leaves) for o in obj]
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return ("namedtuple", type(obj), items)
        return (type(obj).__name__, type(obj), items)
    if isinstance(obj, dict):
        return ("dict", type(obj), {k: _flatten(v, leaves) for k, v in obj.items()})
    return ("const", obj)


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index


def _unflatten(template, tensors):
    if isinstance(template, _Slot):
        return tensors[template.index]
    kind = template[0]
    if kind == "const":
        return template[1]
    if kind == "dict":
        return template[1]((k, _unflatten(v, tensors)) for k, v in template[2].items())
    items = [_unflatten(t, tensors) for t in template[2]]
    return template[1](*items) if kind == "namedtuple" else template[1](items)


def _run(function, args, kwargs, params, *, complete, reentrant, preserve_rng_state, context_fn,
         check):
    tensor_args = [a for a in args if isinstance(a, kiln.Tensor)]
    tensor_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, kiln.Tensor)}
    inputs = tensor_args + list(tensor_kwargs.values())
    forward_ctx, recompute_ctx = context_fn()
    state = _State(function, args, kwargs, preserve_rng_state, recompute_ctx, check)
    grad_on = kiln.is_grad_enabled()
    routed = list(inputs) + [p for p in params if all(p is not i for i in inputs)]
    if reentrant and grad_on and not any(t.requires_grad for t in inputs):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                      stacklevel=3)
    elif grad_on and not complete and not any(t.requires_grad for t in routed):
        # A closure may read parameters: a tensor needing grad makes the result keep a node.
        routed.append(kiln.empty(0, requires_grad=True))
    with forward_ctx:
        out = _CheckpointFunction.apply(state, len(inputs), *routed)
    return _unflatten(state.structure, out)


class _CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, state, n_inputs, *routed):
        ctx.state = state
        ctx.params = routed[n_inputs:]
        ctx.save_for_backward(*routed[:n_inputs])
        out = state.function(*state.args, **state.kwargs)
        leaves: list = []
        state.structure = _flatten(out, leaves)
        state.metadata = [(tuple(t.shape), t.dtype) for t in leaves]
        ctx.mark_non_differentiable(*[t for t in leaves if not t.is_floating_point()])
        return tuple(leaves)

    @staticmethod
    def backward(ctx, *grads):
        if kiln.is_grad_enabled():  # the engine runs backward with grad on for create_graph
            raise RuntimeError(
                "kiln.utils.checkpoint: double backward (create_graph=True) through a "
                "checkpointed function is not supported: its recomputation is a separate graph")
        state = ctx.state
        detached = [t.detach().requires_grad_(t.requires_grad) for t in ctx.saved_tensors]
        outputs = _recompute(state, detached)
        if state.check:
            _check_same(state.metadata, outputs)
        targets = detached + list(ctx.params)
        pairs = [(o, g) for o, g in zip(outputs, grads, strict=True)
                 if o.requires_grad and g is not None]
        if not pairs:
            return (None, None) + (None,) * len(targets)
        wanted = [t for t in targets if t.requires_grad]
        with kiln.enable_grad():
            known = {_accumulator(t) for t in wanted}
        # Leaves reached but not routed through this node: accumulated here (torch's reentrant
        # backward does the same for all of them).
        others = [n.variable for n in _reachable_leaves([o for o, _ in pairs]) if n not in known]
        # retain_graph: a closure may reach into the outer graph, which its own pass frees.
        result = kiln.autograd.grad([o for o, _ in pairs], wanted + others,
                                    [g for _, g in pairs], retain_graph=True, allow_unused=True)
        with kiln.no_grad():
            for leaf, g in zip(others, result[len(wanted):], strict=True):
                if g is not None:
                    leaf.grad = g if leaf.grad is None else leaf.grad.add_(g)
        computed = iter(result[:len(wanted)])
        return (None, None) + tuple(next(computed) if t.requires_grad else None
                                    for t in targets)


def _recompute(state, detached) -> list:
    args = list(state.args)
    it = iter(detached)
    args = [next(it) if isinstance(a, kiln.Tensor) else a for a in args]
    kwargs = {k: next(it) if isinstance(v, kiln.Tensor) else v for k, v in state.kwargs.items()}
    with contextlib.ExitStack() as stack:
        if state.rng is not None:
            stack.callback(kiln.set_rng_state, kiln.get_rng_state())
            kiln.set_rng_state(state.rng)
        for device, (enabled, dtype) in state.autocast.items():
            stack.enter_context(kiln.autocast(device, dtype, enabled))
        stack.enter_context(kiln.enable_grad())
        stack.enter_context(state.recompute_ctx)
        out = state.function(*args, **kwargs)
    leaves: list = []
    _flatten(out, leaves)
    return leaves


def _check_same(metadata, outputs) -> None:
    now = [(tuple(t.shape), t.dtype) for t in outputs]
    if now != metadata:
        raise CheckpointError(
            "kiln.utils.checkpoint: Recomputed values have different metadata than during the "
            f"forward pass.\nforward: {metadata}\nrecomputation: {now}")


def _accumulator(t):
    """The AccumulateGrad node of leaf `t` (one per leaf, the same object every time)."""
    return t.view_as(t).grad_fn.next_functions[0][0]


def _reachable_leaves(outputs) -> list:
    """The AccumulateGrad nodes the graphs of `outputs` reach."""
    seen, leaves = set(), []
    stack = [o.grad_fn for o in outputs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() == "AccumulateGrad":
            leaves.append(node)
            continue
        stack.extend(n for n, _ in node.next_functions)
    return leaves
