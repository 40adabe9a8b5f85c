"""kiln.compile: the user-facing wrapper around the frame hook."""

from __future__ import annotations

import functools
import sys

import kiln
from kiln import _C
from kiln._capture import side_effects
from kiln._capture.convert_frame import Compiler, reset_code_states


def _check_python() -> None:
    if sys.version_info[:2] != (3, 11):
        v = sys.version_info
        raise RuntimeError(f"kiln.compile needs CPython 3.11; this is {v.major}.{v.minor}")


def compile(model=None, *, backend=None, fullgraph=False, dynamic=None, mode=None, options=None):
    """Returns `model` (a function, method, lambda or kiln.nn.Module) compiled: same results,
    captured into graphs by evaluating its bytecode symbolically.

    backend: None or "kiln" (kiln's optimizing CPU compiler: graphs are partitioned, what it
    cannot compile runs on the eager kernels), "eager" (run captured graphs with the eager
    kernels), or a callable `backend(graph, example_inputs) -> callable`.
    fullgraph: raise CaptureError on any graph break.
    dynamic: True makes every dimension symbolic from the start, False never, None (default)
    makes a dimension symbolic once it changes between calls.
    mode: accepted for torch.compile compatibility.
    options: "recompile_limit" (default 8) and "backend_fallback" (default True; False makes an
    op the compiler cannot handle an error).
    """
    _check_python()
    if mode not in (None, "default", "reduce-overhead", "max-autotune",
                    "max-autotune-no-cudagraphs"):
        raise ValueError(f"kiln.compile: unknown mode {mode!r}")
    options = dict(options or {})
    from kiln._dynamo import config

    limit = int(options.pop("recompile_limit", config.cache_size_limit))
    backend_options = {"backend_fallback": bool(options.pop("backend_fallback", True))}
    if options:
        raise ValueError(f"kiln.compile: unknown options {sorted(options)} (known: "
                         "recompile_limit, backend_fallback)")
    if backend not in (None, "eager", "kiln") and not callable(backend):
        raise ValueError(f"kiln.compile: unknown backend {backend!r} "
                         "(expected None, 'kiln', 'eager' or a callable)")

    def apply(m):
        compiler = Compiler(backend, fullgraph, dynamic, limit, options=backend_options)
        if isinstance(m, kiln.nn.Module):
            return OptimizedModule(m, compiler)
        if not callable(m):
            raise TypeError(f"kiln.compile expects a function or a kiln.nn.Module, got "
                            f"{type(m).__name__}")
        return wrap_with_compiler(m, compiler)

    return apply if model is None else apply(model)


def wrap_with_compiler(fn, compiler):
    callback = compiler.callback
    owner = getattr(fn, "__self__", None)
    for f in (fn, getattr(type(owner), "forward", None) if owner is not None else None):
        code = getattr(getattr(f, "__func__", f), "__code__", None)
        if code is not None:  # what the user compiled: never left to plain Python
            compiler.root_codes.add(code)

    @functools.wraps(fn)
    def compiled(*args, **kwargs):
        previous = _C._capture.set_callback(callback)
        try:
            return fn(*args, **kwargs)
        finally:
            _C._capture.set_callback(previous)

    compiled._kiln_compiler = compiler
    compiled._kiln_original = fn
    return compiled


class OptimizedModule(kiln.nn.Module):
    """A compiled module: calling it runs the original module's `__call__` (hooks included)
    with its `forward` captured; every other attribute is the original module's."""

    def __init__(self, mod, compiler) -> None:
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_compiled_call", wrap_with_compiler(mod.__call__, compiler))

    def forward(self, *args, **kwargs):
        return self._compiled_call(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._compiled_call(*args, **kwargs)

    def __getattr__(self, name):
        if name == "_orig_mod":
            return self._modules["_orig_mod"]
        return getattr(self._modules["_orig_mod"], name)

    def __repr__(self) -> str:
        return f"OptimizedModule({self._orig_mod!r})"

    def __deepcopy__(self, memo):
        """A compiled copy of a copy of the module (an EMA model, AveragedModel): the copy's
        calls must run the copy's weights, not go through the original's bound __call__."""
        import copy

        mod = copy.deepcopy(self._modules["_orig_mod"], memo)
        new = OptimizedModule(mod, self._compiled_call._kiln_compiler)
        memo[id(self)] = new
        return new

    def __reduce__(self):
        """Pickled (kiln.save of a whole compiled model) as the module and how it was compiled;
        loading compiles it again (a custom backend must itself pickle)."""
        c = self._compiled_call._kiln_compiler
        options = {"recompile_limit": c.recompile_limit, **c.options}
        return (_compiled_again, (self._modules["_orig_mod"], c.backend, c.fullgraph, c.dynamic,
                                  options))


def _compiled_again(mod, backend, fullgraph, dynamic, options):
    return compile(mod, backend=backend, fullgraph=fullgraph, dynamic=dynamic, options=options)


def reset() -> None:
    """Forgets every compiled entry and resume function: the next calls capture again."""
    _C._capture.reset()
    reset_code_states()
    side_effects.forget_replays()


def allow_in_graph(fn):
    """Records calls of `fn` in the graph as one node, run as `fn` itself (not traced into):
    for a function on tensors that kiln should not look inside (a custom op, a library call).
    It must return tensors (or a tuple or list of them) and have no other effects; the compiler
    cannot compile it, so it runs eagerly between compiled parts. Returns `fn`."""
    if not callable(fn):
        raise TypeError(f"allow_in_graph expects a function, got {type(fn).__name__}")
    from kiln._capture import ops

    ops.ALLOWED_IN_GRAPH[id(fn)] = (fn, disable(fn))  # the node runs it uncaptured
    return fn


def disable(fn=None, recursive=True):
    """Runs `fn` (and, with recursive=True, everything it calls) eagerly, never captured."""
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    code = getattr(fn, "__code__", None)
    if code is not None:
        _C._capture.mark_skip(code)

    @functools.wraps(fn)
    def eager(*args, **kwargs):
        if not recursive:
            return fn(*args, **kwargs)
        previous = _C._capture.set_callback(None)
        try:
            return fn(*args, **kwargs)
        finally:
            _C._capture.set_callback(previous)

    eager._kiln_disabled = True
    return eager
