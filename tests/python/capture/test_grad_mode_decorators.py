"""Grad-mode regions inside compiled code in every spelling: `with kiln.no_grad()`, functions
decorated with `@kiln.no_grad()` / `@kiln.inference_mode()` (HF's rotary embedding, samplers'
`p_sample`), `with kiln.inference_mode()` and `set_grad_enabled`. Each is one graph with no
break, and what is computed inside records no history, as in eager."""

from __future__ import annotations

import pytest
from corpus_util import assert_same, fresh_capture, run_case  # noqa: F401

import kiln


@kiln.no_grad()
def rotary(x):
    return x.cos() * 2


@kiln.no_grad
def rotary_bare(x):
    return x.cos() * 2


@kiln.inference_mode()
def sample(x):
    return x.sin() + 1


@kiln.set_grad_enabled(False)
def frozen(x):
    return x.exp()


def in_inference_block(x):
    with kiln.inference_mode():
        y = x * 2
    return y


@pytest.mark.parametrize("inner", [rotary, rotary_bare, sample, frozen, in_inference_block],
                         ids=lambda f: f.__name__)
def test_a_grad_mode_region_is_captured_without_a_break(inner):
    def fn(x):
        return inner(x) + x * 3  # the region's value has no history, the rest has

    x = kiln.randn(4, requires_grad=True)
    info = run_case(fn, x, expect_graphs=1, expect_breaks=0)
    out = info.compiled(x)
    assert out.requires_grad
    out.sum().backward()
    assert_same(x.grad, kiln.full((4,), 3.0))  # nothing flows through the no-grad region
    assert kiln.is_grad_enabled()
