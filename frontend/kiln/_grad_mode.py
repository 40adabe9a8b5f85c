"""Grad-mode state: kiln.no_grad, enable_grad, set_grad_enabled, inference_mode.

The state is per thread (like torch's): a ``no_grad`` block in one thread does not affect
another. Every context manager here also works as a decorator, restores the previous state on
exit (so blocks nest), and ``no_grad``/``enable_grad``/``inference_mode`` may decorate without
parentheses (``@kiln.no_grad``). Autograd reads the state through ``is_grad_enabled()`` and
``is_inference_mode_enabled()``.
"""

from __future__ import annotations

import functools
import inspect

from kiln._C import _autograd

__all__ = [
    "enable_grad",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "set_grad_enabled",
]


class _State:
    """The calling thread's flags, kept in C++ where the ops read them (kiln._C._autograd);
    every new thread starts with grad enabled and inference mode off. Capture guards read
    ``_state.grad_enabled``."""

    @property
    def grad_enabled(self) -> bool:
        return _autograd.is_grad_enabled()

    @grad_enabled.setter
    def grad_enabled(self, mode: bool) -> None:
        _autograd._set_grad_enabled(bool(mode))

    @property
    def inference_mode(self) -> bool:
        return _autograd.is_inference_mode_enabled()

    @inference_mode.setter
    def inference_mode(self, mode: bool) -> None:
        _autograd._set_inference_mode(bool(mode))


_state = _State()


def is_grad_enabled() -> bool:
    """True unless gradient recording is disabled in this thread."""
    return _autograd.is_grad_enabled()


def is_inference_mode_enabled() -> bool:
    """True inside an ``inference_mode()`` block in this thread."""
    return _autograd.is_inference_mode_enabled()


_set_grad_enabled = _autograd._set_grad_enabled


class _DecoratorContextManager:
    """A context manager that can also decorate functions and generator functions.

    Each decorated call enters a fresh copy (``clone()``), so recursive and concurrent calls do
    not share the saved previous state.
    """

    def clone(self):
        return self.__class__()

    def __call__(self, func):
        if inspect.isclass(func):
            raise TypeError(f"{type(self).__name__} cannot decorate a class; decorate its methods")
        if inspect.isgeneratorfunction(func):
            return self._wrap_generator(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)

        return wrapper

    def _wrap_generator(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            gen = func(*args, **kwargs)
            # Run each step of the generator under the mode, but not the caller's code between.
            try:
                with self.clone():
                    response = gen.send(None)
                while True:
                    try:
                        request = yield response
                    except GeneratorExit:
                        with self.clone():
                            gen.close()
                        raise
                    except BaseException as exc:  # noqa: BLE001 - forwarded into the generator
                        with self.clone():
                            response = gen.throw(exc)
                    else:
                        with self.clone():
                            response = gen.send(request)
            except StopIteration as stop:
                return stop.value

        return wrapper

    def __enter__(self):
        raise NotImplementedError

    def __exit__(self, exc_type, exc_value, traceback):
        raise NotImplementedError


class _NoParamDecoratorContextManager(_DecoratorContextManager):
    """Allows ``@no_grad`` as well as ``@no_grad()``."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_NoParamDecoratorContextManager):  # noqa: N801 - torch spelling
    """Disables gradient recording inside the block (or the decorated function)."""

    def __init__(self) -> None:
        self.prev = False

    def __enter__(self) -> None:
        self.prev = is_grad_enabled()
        _set_grad_enabled(False)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _set_grad_enabled(self.prev)


class enable_grad(_NoParamDecoratorContextManager):  # noqa: N801 - torch spelling
    """Enables gradient recording inside the block, e.g. within a ``no_grad`` region."""

    def __init__(self) -> None:
        self.prev = False

    def __enter__(self) -> None:
        self.prev = is_grad_enabled()
        _set_grad_enabled(True)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _set_grad_enabled(self.prev)


class set_grad_enabled(_DecoratorContextManager):  # noqa: N801 - torch spelling
    """Sets grad mode to ``mode``.

    As in torch, the mode takes effect when the object is created, so a plain call
    ``kiln.set_grad_enabled(False)`` switches the mode; used in a ``with`` block or as a
    decorator, the previous mode comes back on exit.
    """

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled(): mode must be a bool, not {type(mode).__name__}")
        self.prev = is_grad_enabled()
        self.mode = mode
        _set_grad_enabled(mode)

    def __call__(self, func):
        # Decorating must not leave the mode switched at definition time.
        _set_grad_enabled(self.prev)
        return super().__call__(func)

    def __enter__(self) -> None:
        _set_grad_enabled(self.mode)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _set_grad_enabled(self.prev)

    def clone(self):
        return self.__class__(self.mode)


class inference_mode(_DecoratorContextManager):  # noqa: N801 - torch spelling
    """Inference mode: grad recording off and is_inference_mode_enabled() true.

    As in torch, ``inference_mode(mode)`` sets grad mode to ``not mode``: an
    ``inference_mode(False)`` block clears the inference flag and enables grad (even inside
    ``no_grad``).
    """

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        # Used as a bare decorator: @inference_mode
        return cls()(mode)

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode
        self.prev_grad = True
        self.prev_inference = False

    def __enter__(self) -> None:
        self.prev_grad = is_grad_enabled()
        self.prev_inference = is_inference_mode_enabled()
        _state.inference_mode = self.mode
        _set_grad_enabled(not self.mode)

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        _state.inference_mode = self.prev_inference
        _set_grad_enabled(self.prev_grad)

    def clone(self):
        return self.__class__(self.mode)
