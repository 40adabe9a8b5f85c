"""``multinomial`` compiled: the categories eager samples for the same generator state, with and
without replacement, one sample (a language model's next token) or several, 1-d and 2-d weights
in every float dtype, zero weights, a batch that changes between calls, and the generator left
where eager leaves it; no node runs eagerly."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_compiled_random import draws_as_eager, one_compiled_part

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend


def weights(*shape, dtype=kiln.float32, zeros=0):
    """Positive weights (not normalized: multinomial takes any), the first `zeros` categories
    of each row 0."""
    w = kiln.rand(*shape, dtype=kiln.float64) + 0.05
    if zeros:
        w[..., :zeros] = 0
    return w.to(dtype)


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16],
                         ids=str)
@pytest.mark.parametrize("k,replacement", [(1, False), (4, False), (1, True), (9, True)])
def test_multinomial_samples_eagers_categories(dtype, k, replacement):
    fn = lambda w: kiln.multinomial(w, k, replacement)  # noqa: E731
    one_compiled_part(draws_as_eager(fn, weights(5, 40, dtype=dtype)))


@pytest.mark.parametrize("k,replacement", [(1, False), (3, False), (6, True)])
def test_one_row_of_weights_with_zeros(k, replacement):
    fn = lambda w: w.multinomial(k, replacement=replacement)  # noqa: E731
    one_compiled_part(draws_as_eager(fn, weights(25, zeros=20)))


def test_zero_weights_are_never_drawn():
    # Many samples with replacement from rows whose first half weighs nothing.
    backend = draws_as_eager(lambda w: kiln.multinomial(w, 200, True), weights(3, 16, zeros=8))
    one_compiled_part(backend)
    with kiln.no_grad():
        got = kiln.compile(lambda w: kiln.multinomial(w, 200, True))(weights(3, 16, zeros=8))
    assert bool((got >= 8).all())


def test_next_token_sampling_with_a_changing_batch():
    """nanoGPT's sampling step: temperature, top-k filter, softmax, one sample, appended."""

    def step(idx, logits):
        logits = logits / 0.8
        v, _ = kiln.topk(logits, 10)
        logits = logits.masked_fill(logits < v[:, [-1]], float("-inf"))
        probs = F.softmax(logits, dim=-1)
        return kiln.cat((idx, kiln.multinomial(probs, num_samples=1)), dim=1)

    def args(b):
        return kiln.randint(0, 100, (b, 3)), kiln.randn(b, 100)

    backend = draws_as_eager(step, *args(2), calls=[args(5), args(3)])
    for report in backend.reports:
        assert report.eager_nodes == 0 and report.fallbacks == []


def test_an_explicit_generator_draws_from_it_as_eager():
    """A generator object is not captured (the call runs eagerly): its draws and its state are
    eager's."""
    g = kiln.Generator()
    w = weights(2, 9)
    fn = lambda w: kiln.multinomial(w, 2, generator=g) * 1  # noqa: E731
    with kiln.no_grad():
        g.manual_seed(3)
        want, want_state = fn(w), g.get_state()
        g.manual_seed(3)
        got = kiln.compile(fn, backend=CpuBackend(fallback=True))(w)
    assert kiln.equal(got, want) and kiln.equal(g.get_state(), want_state)
