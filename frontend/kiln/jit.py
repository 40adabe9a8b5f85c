"""kiln.jit: torch.jit's entry points, for model code written against TorchScript.

kiln compiles Python with ``kiln.compile`` rather than TorchScript, so scripting and tracing hand
back what they are given and the decorators leave functions as they are: code written for both
worlds (``if not torch.jit.is_scripting(): ...``) takes its eager branch, as it does under torch
when not scripted. kiln.compile's capture inlines this module (``_capture/calls.py``), so these
calls inside a compiled forward fold to constants instead of breaking the graph. Saving
TorchScript archives has no kiln counterpart: ``save``/``load`` point to ``kiln.export``.
"""

from __future__ import annotations

import typing

from kiln.nn import Module

__all__ = [
    "Final",
    "Future",
    "ScriptFunction",
    "ScriptModule",
    "annotate",
    "export",
    "fork",
    "freeze",
    "ignore",
    "interface",
    "is_scripting",
    "is_tracing",
    "load",
    "optimize_for_inference",
    "save",
    "script",
    "script_if_tracing",
    "script_method",
    "trace",
    "trace_module",
    "unused",
    "wait",
]

Final = typing.Final


def is_scripting() -> bool:
    """Always False: kiln never runs code as TorchScript."""
    return False


def is_tracing() -> bool:
    """Always False: torch.jit.trace's tracer has no kiln counterpart (see ``trace``)."""
    return False


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """``obj`` unchanged: a module or function already runs as written (compile it with
    ``kiln.compile`` for speed)."""
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None,
          check_tolerance=1e-5, strict=True, _force_outplace=False, _module_class=None,
          _compilation_unit=None, example_kwarg_inputs=None, _store_inputs=True):
    """``func`` unchanged; the example inputs are not run (nothing is recorded from them)."""
    return func


def trace_module(mod, inputs, optimize=None, check_trace=True, check_inputs=None,
                 check_tolerance=1e-5, strict=True, _force_outplace=False, _module_class=None,
                 _compilation_unit=None, example_inputs_is_kwarg=False, _store_inputs=True):
    """``mod`` unchanged, as ``trace``."""
    return mod


def script_if_tracing(fn):
    return fn


def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    return mod


def optimize_for_inference(mod, other_methods=None):
    return mod


def ignore(drop=False, **kwargs):
    """Usable bare (``@ignore``) or called (``@ignore(drop=True)``), as torch's."""
    if callable(drop):
        return drop

    def decorator(fn):
        return fn

    return decorator


def unused(fn):
    return fn


def export(fn):
    return fn


def interface(obj):
    return obj


def script_method(fn):
    return fn


def annotate(the_type, the_value):
    """``the_value``: the type only informs TorchScript's compiler."""
    return the_value


class ScriptModule(Module):
    """The base of scripted modules; subclasses are plain kiln modules (``script`` returns
    modules unchanged, so ordinary modules are not instances of it)."""


ScriptFunction = type(is_scripting)


class Future(typing.NamedTuple):
    """What ``fork`` returns: the call already ran, so ``wait`` only hands back its result (a
    named tuple, which kiln.compile's capture builds and reads like any other)."""

    result: typing.Any

    def wait(self):
        return self.result

    def value(self):
        return self.result

    def done(self) -> bool:
        return True

    def then(self, callback):
        return Future(callback(self))


def fork(func, *args, **kwargs) -> Future:
    """Runs ``func(*args, **kwargs)`` now, on this thread (TorchScript's inter-op
    parallelism has no kiln counterpart); results and gradients are those of the plain call."""
    return Future(func(*args, **kwargs))


def wait(future):
    return future.result


def _no_archives(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"kiln.jit.{what}: kiln has no TorchScript archives. Save a model's weights with "
        "kiln.save(model.state_dict(), path), or a whole program with kiln.export(model, args) "
        "and ExportedProgram.save / kiln.load_exported."
    )


def save(m, f, _extra_files=None):
    raise _no_archives("save")


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    raise _no_archives("load")
