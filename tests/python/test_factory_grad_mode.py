"""Grad-mode state (kiln.no_grad & co): context managers, decorators, nesting, thread-locality.

Each scenario runs against torch and kiln with the same code and records the observed states,
so torch is the oracle for the semantics.
"""

import threading

import pytest
import torch

import kiln


def observe(lib):
    return (lib.is_grad_enabled(), lib.is_inference_mode_enabled())


def scenario_nesting(lib, log):
    log.append(observe(lib))
    with lib.no_grad():
        log.append(observe(lib))
        with lib.enable_grad():
            log.append(observe(lib))
            with lib.no_grad():
                log.append(observe(lib))
            log.append(observe(lib))
        log.append(observe(lib))
    log.append(observe(lib))


def scenario_set_grad_enabled(lib, log):
    with lib.set_grad_enabled(False):
        log.append(observe(lib))
        with lib.set_grad_enabled(True):
            log.append(observe(lib))
        log.append(observe(lib))
    log.append(observe(lib))
    lib.set_grad_enabled(False)  # a plain call switches the mode
    log.append(observe(lib))
    lib.set_grad_enabled(True)
    log.append(observe(lib))


def scenario_inference_mode(lib, log):
    with lib.inference_mode():
        log.append(observe(lib))
        with lib.inference_mode(False):
            log.append(observe(lib))
        log.append(observe(lib))
    log.append(observe(lib))
    with lib.no_grad(), lib.inference_mode(False):
        log.append(observe(lib))


def scenario_decorators(lib, log):
    @lib.no_grad()
    def f():
        log.append(observe(lib))
        return 7

    @lib.no_grad
    def g():
        log.append(observe(lib))

    @lib.enable_grad()
    def h():
        log.append(observe(lib))

    @lib.set_grad_enabled(False)
    def s():
        log.append(observe(lib))

    log.append(observe(lib))  # decorating with set_grad_enabled leaves the mode alone

    @lib.inference_mode()
    def i():
        log.append(observe(lib))

    @lib.inference_mode
    def j():
        log.append(observe(lib))

    log.append(f())
    g()
    with lib.no_grad():
        h()
    s()
    i()
    j()
    log.append(f.__name__)
    log.append(observe(lib))


def scenario_generator(lib, log):
    @lib.no_grad()
    def gen():
        for n in range(2):
            log.append(("inside", n, observe(lib)))
            yield n

    for n in gen():
        log.append(("outside", n, observe(lib)))


def scenario_exception_restores(lib, log):
    with pytest.raises(KeyError):
        with lib.no_grad():
            raise KeyError("x")
    log.append(observe(lib))

    @lib.inference_mode()
    def boom():
        raise ValueError("y")

    with pytest.raises(ValueError):
        boom()
    log.append(observe(lib))


SCENARIOS = [
    scenario_nesting,
    scenario_set_grad_enabled,
    scenario_inference_mode,
    scenario_decorators,
    scenario_generator,
    scenario_exception_restores,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_grad_mode_matches_torch(scenario):
    expected, got = [], []
    scenario(torch, expected)
    scenario(kiln, got)
    assert got == expected
    assert observe(kiln) == (True, False)


def test_grad_mode_is_thread_local():
    seen = {}
    entered, release = threading.Event(), threading.Event()

    def worker():
        entered.wait()
        seen["worker"] = observe(kiln)
        with kiln.inference_mode():
            seen["worker_inside"] = observe(kiln)
            release.set()

    th = threading.Thread(target=worker)
    th.start()
    with kiln.no_grad():
        entered.set()
        release.wait(5)
        seen["main"] = observe(kiln)
    th.join(5)
    assert seen == {
        "worker": (True, False),
        "worker_inside": (False, True),
        "main": (False, False),
    }


def test_set_grad_enabled_rejects_non_bool():
    with pytest.raises(TypeError, match="bool"):
        kiln.set_grad_enabled("no")
    assert kiln.is_grad_enabled()


def test_decorated_function_is_reentrant():
    @kiln.no_grad()
    def rec(n):
        if n:
            rec(n - 1)
        return kiln.is_grad_enabled()

    assert rec(3) is False
    assert kiln.is_grad_enabled()
