"""broadcast_tensors, meshgrid, the transposing properties (.T, .mT, .H, .mH), zero_ and fill_
compile with no eager node (they were opaque calls or eager mutations), equal to eager; their
eager forms are op-table rows with torch's argument errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln
from kiln._capture.backend_compiled import CpuBackend


def _no_eager(backend) -> None:
    assert backend.reports and all(r.eager_nodes == 0 for r in backend.reports)


@pytest.mark.parametrize("listed", [False, True])
def test_broadcast_tensors(listed):
    def fn(x, y, z):
        a, b, c = kiln.broadcast_tensors([x, y, z]) if listed else kiln.broadcast_tensors(x, y, z)
        return a * 2 + b - c, c

    _no_eager(run_compiled(fn, rand(3, 1), rand(4), rand(2, 1, 1)))

    def derived(x):  # tensors of one input share its size symbols
        return fn(x.sum(1, keepdim=True), x, x[:1])

    _no_eager(run_compiled(derived, rand(5, 4), dynamic=True, calls=[(rand(7, 4),)]))


def test_broadcast_tensors_of_two_size_symbols_declines_with_its_reason():
    """Sizes s0 and s1 broadcast only where they agree: eager, with the reason, and right."""
    backend = run_compiled(lambda x, y: [t + 1 for t in kiln.broadcast_tensors(x, y)],
                           rand(5), rand(5, seed=1), dynamic=True, strict=False,
                           calls=[(rand(7), rand(7, seed=1))])
    reasons = [reason for r in backend.reports for _, target, reason in r.fallbacks
               if target == "kiln.broadcast_tensors"]
    assert reasons == ["built as an opaque `call`: sizes s0, s1 that broadcast for some values "
                       "only"]


@pytest.mark.parametrize("indexing", ["ij", "xy", None])
def test_meshgrid(indexing):
    def fn(x, y, z):
        kw = {} if indexing is None else {"indexing": indexing}
        gx, gy, gz = kiln.meshgrid(x, y, z, **kw)
        return gx * 10 + gy - gz

    _no_eager(run_compiled(fn, rand(3), rand(4), kiln.tensor(0.5)))
    _no_eager(run_compiled(fn, rand(3), rand(4), rand(2), dynamic=True,
                           calls=[(rand(5), rand(6), rand(2))]))


def test_meshgrid_matches_torch():
    x, y = rand(3), rand(4)
    for indexing in ("ij", "xy"):
        ours = kiln.compile(lambda a, b: kiln.meshgrid(a, b, indexing=indexing))(x, y)
        theirs = torch.meshgrid(torch.tensor(x.numpy()), torch.tensor(y.numpy()),
                                indexing=indexing)
        assert [tuple(o.shape) for o in ours] == [tuple(t.shape) for t in theirs]
        for o, t in zip(ours, theirs, strict=True):
            assert o.numpy().tolist() == t.numpy().tolist()


@pytest.mark.parametrize("prop", ["T", "H", "mT", "mH"])
def test_transposing_properties(prop):
    shape = (3, 5) if prop in ("T", "H") else (2, 3, 5)
    _no_eager(run_compiled(lambda x: getattr(x, prop) * 2, rand(*shape)))


def test_T_of_a_vector_is_the_vector():
    _no_eager(run_compiled(lambda x: x.T + 1, rand(5)))


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.int32, kiln.bool])
def test_zero_and_fill(dtype):
    def fn(x, v):
        y = x * 2
        y.zero_()
        z = x.clone()
        z.fill_(3)
        w = x.clone()
        w.fill_(v)  # a 0-d tensor value
        x[1:].fill_(1)  # a view of an input: written back
        return y, z, w

    _no_eager(run_compiled(fn, (rand(4, 3) * 3).to(dtype), kiln.tensor(2.5).to(dtype)))


def test_fill_of_a_value_the_dtype_cannot_hold_is_torchs_error():
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8"):
        kiln.zeros(2, dtype=kiln.uint8).fill_(-2.5)


def test_eager_forms_are_table_rows_with_torchs_errors():
    x = rand(2, 3)
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for @"):
        x @ 2  # noqa: B018
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for @"):
        2 @ x  # noqa: B018
    with pytest.raises(TypeError, match=r"copy_\(\): argument 'src' \(position 1\) must be Tensor"):
        x.copy_(1)
    with pytest.raises(TypeError, match=r"broadcast_tensors\(\): argument 'tensors'"):
        kiln.broadcast_tensors(x, 1)
    with pytest.raises(TypeError, match=r"item\(\) takes 0 positional arguments"):
        x.item(1)
    assert kiln.tensor(3).item() == 3 and kiln.tensor(True).item() is True
    assert kiln.zero_(x) is x and x.sum().item() == 0
    assert [tuple(t.shape) for t in kiln.broadcast_tensors(rand(2, 1), rand(3))] == [(2, 3)] * 2
    assert tuple(x.as_strided((3, 2), (1, 3)).shape) == (3, 2)


def test_copy_records_the_gradient_of_its_source():
    src = rand(3).requires_grad_()
    dst = kiln.zeros(2, 3)
    dst.copy_(src)
    dst.sum().backward()
    assert src.grad.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64])
@pytest.mark.parametrize("bounds", [(0, 1, 8), (-3.5, 2.25, 101), (5, -5, 7), (2, 2, 3)])
def test_linspace_compiles(dtype, bounds):
    a, b, n = bounds

    def fn(x):
        return kiln.linspace(a, b, n, dtype=dtype) + x

    x = kiln.zeros(n, dtype=dtype)
    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(x)
    eps = float(kiln.finfo(dtype).eps)
    np_ref = kiln.linspace(a, b, n, dtype=dtype).numpy()
    np.testing.assert_allclose(got.numpy(), np_ref, rtol=eps, atol=eps * max(abs(a), abs(b)))
    assert got[0].item() == np_ref[0] and got[-1].item() == np_ref[-1]  # the ends exactly
    assert all(r.eager_nodes == 0 for r in backend.reports)


def test_every_eager_node_has_a_reason():
    """Nodes with effects the compiled code cannot replay (an in-place sampler) run eagerly and
    are listed in the report's fallbacks with why (they were silent eager nodes)."""

    def fn(x):
        return x + kiln.empty_like(x).random_() * 0  # a whole dtype range: eager

    backend = CpuBackend()
    kiln.compile(fn, backend=backend)(rand(3, 4))
    (report,) = backend.reports
    assert report.eager_nodes == len(report.fallbacks) == 1
    assert report.fallbacks[0][1:] == ("kiln.Tensor.random_", "built as an opaque `call`: "
                                       "random_() over the dtype's whole range")
