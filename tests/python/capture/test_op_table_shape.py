"""The layout copies and masks of the op table (masked_fill, tril/triu, flip, roll, repeat,
stack, pad, one_hot) and advanced indexing by a constant int list, compiled against eager kiln
beyond the generic samples of test_op_table.py: their attributes (negative dims, several dims,
every pad mode, negative pads), dtypes, non-contiguous and zero-size inputs and symbolic sizes,
each in one compiled part with no eager node; and the indexing kiln keeps eager, with its
reason."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

DTYPES = [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16, kiln.int64, kiln.int32,
          kiln.uint8, kiln.bool]  # fmt: skip


def _typed(x, dtype):
    if dtype == kiln.bool:
        return x > 0
    if not dtype.is_floating_point:
        return (x.abs() * 3).round().to(dtype)
    return x.to(dtype)


def _one_part(fn, *args, **kw):
    backend = run_compiled(fn, *args, **kw)
    (report,) = backend.reports
    assert len(report.parts) == 1 and report.eager_nodes == 0, report.fallbacks
    return backend


CASES = {
    "masked_fill": lambda x: x.masked_fill(x.sum(-1, keepdim=True) > 0, -1.5),
    "masked_fill_tensor": lambda x: x.masked_fill(x > 0, x.sum() * 0.25),
    "masked_fill_broadcast": lambda x: x[0].masked_fill(x > 0, 0.5),
    "masked_fill_": lambda x: (x * 2).masked_fill_(x < 0, 7),
    "tril": lambda x: x.tril(-1) + x.triu(2),
    "tril_": lambda x: (x + 1).tril_(1),
    "flip": lambda x: x.flip(0, -1) - kiln.flip(x, (1,)),
    "roll": lambda x: x.roll((1, -3), (-1, 0)) + x.roll(-7) + kiln.roll(x, 2, 1),
    "repeat": lambda x: x.repeat(1, 2, 2) + 0,
    "stack": lambda x: kiln.stack([x, x.flip(0), x * 2], dim=-1),
    "stack_dim1": lambda x: kiln.stack((x, x), 1),
    "pad_constant": lambda x: F.pad(x, (2, 1, -1, 3), value=-2.0),
    "pad_reflect": lambda x: F.pad(x[None], (2, 3, 1, 1), mode="reflect"),
    "pad_replicate": lambda x: F.pad(x[None], (0, 4), mode="replicate"),
    "pad_circular": lambda x: F.pad(x[None, None], (3, 2, 1, 0), mode="circular"),
    "list_index": lambda x: x[:, [-1]],
    "list_index_many": lambda x: x[[0, -1, 1, 0]],
    "list_index_mixed": lambda x: x[None, 1:, [2, -3]],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_case_compiles_to_one_part(case):
    fn = CASES[case]
    _one_part(fn, rand(5, 6) * 3)
    _one_part(fn, (rand(6, 5, seed=1) * 3).t())  # non-contiguous
    _one_part(fn, rand(5, 6, seed=2), dynamic=True, calls=[(rand(7, 6, seed=3),)])


@pytest.mark.parametrize("case", ["masked_fill", "tril", "flip", "roll", "repeat", "stack",
                                  "pad_constant", "pad_reflect", "list_index"])  # fmt: skip
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtypes(case, dtype):
    fn = CASES[case]
    x = _typed(rand(4, 6, seed=4), dtype)
    try:
        with kiln.no_grad():
            fn(x.clone())
    except (RuntimeError, TypeError, ValueError):
        pytest.skip("eager rejects the dtype")
    _one_part(fn, x)


@pytest.mark.parametrize("case", ["tril", "flip", "roll", "repeat", "stack", "pad_constant"])
def test_zero_size(case):
    _one_part(CASES[case], rand(0, 6))


def test_one_hot():
    fn = lambda i: F.one_hot(i, 7) * 2  # noqa: E731
    _one_part(fn, kiln.tensor([[0, 6, 3], [1, 1, 5]]))
    _one_part(fn, kiln.tensor([[0, 6, 3], [1, 1, 5]]).t())
    _one_part(fn, kiln.tensor([], dtype=kiln.int64))
    _one_part(fn, kiln.tensor([2, 4]), dynamic=True, calls=[(kiln.tensor([1, 2, 3, 0]),)])


def test_nanogpt_last_position():
    """nanoGPT's `logits[:, [-1], :]` after the lm head, with a symbolic sequence length."""
    w = rand(8, 11, seed=5)

    def fn(h):
        return (h @ w)[:, [-1], :].softmax(-1)

    backend = run_compiled(fn, rand(2, 5, 8), dynamic=True, calls=[(rand(2, 3, 8, seed=6),)])
    assert all(r.eager_nodes == 0 for r in backend.reports)


def _fallback_reasons(fn, *args):
    kiln.compiler.reset()
    backend = CpuBackend(fallback=True)
    with kiln.no_grad():
        kiln.compile(fn, backend=backend)(*args)
    return [entry for r in backend.reports for entry in r.fallbacks]


def test_data_dependent_indexing_stays_eager():
    x = rand(4, 5)
    fallbacks = _fallback_reasons(lambda t: t[t > 0] * 2, x)
    assert [target for _, target, _ in fallbacks] == ["operator.getitem"]
    assert _fallback_reasons(lambda t, i: t[i] * 2, x, kiln.tensor([0, 3])) == []  # a gather
    assert _fallback_reasons(lambda t, i: t[i, i] * 2, x, kiln.tensor([0, 3])) == []
    # separated int tensors compile too (their dims first, as torch's)
    assert _fallback_reasons(lambda t, i: t[i, :, i] * 2, rand(4, 5, 3), kiln.tensor([0, 2])) == []
    fallbacks = _fallback_reasons(lambda t: F.one_hot(t.long().abs()), x)
    assert len(fallbacks) == 1  # no num_classes: the size depends on the values


def test_decline_reasons_are_recorded():
    from kiln._capture import lowerings

    calls = []

    def fn(t):
        return t[t > 0]

    kiln.compiler.reset()
    backend = CpuBackend(fallback=True)
    original = lowerings.lower

    def spy(w, node):
        ok = original(w, node)
        calls.append(node.meta.get("decline"))
        return ok

    lowerings.lower = spy
    try:
        kiln.compile(fn, backend=backend)(rand(3, 4))
    finally:
        lowerings.lower = original
    assert any(c and "boolean-mask" in c for c in calls), calls
