"""kiln.random: torch.random's seeding functions and ``fork_rng``.

Random ops draw from one process-wide generator, ``kiln.default_generator``, when none is passed;
there are no per-device generators, so ``fork_rng`` saves and restores that one state and its
``devices`` argument is accepted for torch's signature only.
"""

from __future__ import annotations

import contextlib

import kiln

__all__ = [
    "default_generator",
    "fork_rng",
    "get_rng_state",
    "initial_seed",
    "manual_seed",
    "seed",
    "set_rng_state",
]

default_generator = kiln.default_generator


def manual_seed(seed):
    """Seeds the generator; returns it, as torch."""
    return kiln.manual_seed(seed)


def seed() -> int:
    """Seeds the generator from a non-deterministic source; returns the seed."""
    return kiln.seed()


def initial_seed() -> int:
    return kiln.initial_seed()


def get_rng_state():
    """The generator's state, a uint8 tensor for ``set_rng_state``."""
    return kiln.get_rng_state()


def set_rng_state(new_state) -> None:
    kiln.set_rng_state(new_state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
             device_type="cuda"):
    """Random numbers drawn inside the block leave the generator as it was before it."""
    if not enabled:
        yield
        return
    state = kiln.get_rng_state()
    try:
        yield
    finally:
        kiln.set_rng_state(state)
