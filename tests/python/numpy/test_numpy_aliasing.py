"""NumPy's identity and aliasing rules under kiln.compile: which ufunc or NumPy function an
argument holds decides the program (guarded by identity, not by type); writes through views
with a negative step reach their base (kiln holds such views as copies, so the capture breaks
where the view is made); arrays passed as overlapping views of one buffer see each other's
writes, also across a graph break; np.sign keeps NaN."""

from __future__ import annotations

import numpy as np
import pytest

import kiln


def compiled_equals_numpy(fn, *make_args):
    """fn on fresh arguments under NumPy and under kiln.compile: results and arguments equal."""
    compiled = kiln.compile(fn)
    for make in make_args:
        ours, theirs = make(), make()
        got, want = compiled(*ours), fn(*theirs)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        for o, t in zip(ours, theirs, strict=True):
            if isinstance(t, np.ndarray):
                np.testing.assert_array_equal(o, t)


def test_a_ufunc_argument_is_guarded_by_identity():
    x = np.array([1.0, 4.0, 9.0])
    apply = kiln.compile(lambda f, x: f(x))
    for f in (np.sqrt, np.log, np.exp, np.sqrt):
        np.testing.assert_array_equal(apply(f, x), f(x))
    reduce_with = kiln.compile(lambda f, x: f(x, axis=0))
    for f in (np.sum, np.max, np.add.reduce, np.multiply.reduce, np.maximum.reduce):
        assert reduce_with(f, x) == f(x, axis=0)


def test_sign_keeps_nan():
    for dt in (np.float64, np.float32):
        a = np.array([-2.0, 0.0, -0.0, 3.0, np.nan], dtype=dt)
        got = kiln.compile(np.sign)(a)
        np.testing.assert_array_equal(got, np.sign(a))
        assert got.dtype == dt
    ints = np.array([-3, 0, 5])
    np.testing.assert_array_equal(kiln.compile(lambda a: np.sign(a))(ints), np.sign(ints))


def write_through_reversed(b):
    v = b[::-1]
    v += 1
    return b


def write_item_of_flipped(b):
    np.flip(b)[0] = 9.0
    return b * 2


def write_strided_reversed(b):
    v = b[::-2]
    v[:] = 3.0
    return b.sum()


def write_through_reversed_then_view(n):
    x = np.zeros((2, 3)) + n
    x[:, ::-1][0] = 5.0
    return x


@pytest.mark.parametrize("fn", [write_through_reversed, write_item_of_flipped,
                                write_strided_reversed], ids=lambda f: f.__name__)
def test_writes_through_negative_step_views_reach_the_base(fn):
    compiled_equals_numpy(fn, lambda: (np.zeros(5),), lambda: (np.arange(5.0),))


def test_write_through_a_reversed_view_of_a_local_array():
    compiled_equals_numpy(write_through_reversed_then_view, lambda: (0,), lambda: (1,))


def test_a_reversed_view_only_read_compiles_whole():
    def f(b):
        v = b[::-1]
        return v * 2 + b

    explained = kiln.explain(f)(np.arange(4.0))
    assert explained.graph_break_count == 0
    compiled_equals_numpy(f, lambda: (np.arange(4.0),))


def test_the_break_names_the_reversed_view():
    explained = kiln.explain(write_through_reversed)(np.zeros(3))
    assert any("negative step" in r.reason for r in explained.break_reasons)


def test_overlapping_views_passed_as_two_arguments():
    def g(a, b):
        a += 1
        return b.sum()

    def make():
        y = np.zeros(4)
        return y[:3], y[1:]

    compiled_equals_numpy(g, make, make)


def test_the_same_array_passed_twice():
    def g(a, b):
        a *= 2
        return a + b

    def make():
        y = np.arange(3.0)
        return y, y

    compiled_equals_numpy(g, make)


def test_a_view_written_after_a_graph_break():
    def f(a):
        v = a[1:]
        v *= 2
        np.unique(a)  # a graph break
        v += 1
        return a.sum()

    compiled_equals_numpy(f, lambda: (np.arange(4.0),), lambda: (np.arange(6.0),))


def test_arrays_that_kiln_cannot_share_are_copied_read_only():
    y = np.arange(6.0)
    y.flags.writeable = False
    f = kiln.compile(lambda a, b: a + b)
    np.testing.assert_array_equal(f(y[:3], y[3:]), y[:3] + y[3:])


def test_arguments_kiln_must_copy_convert_beside_shared_ones():
    """Each argument kind the entry converts on its own: a big-endian array, a reversed view, a
    read-only one and a NumPy scalar are copied, while the writable array beside them is still
    written in place (the caller sees it), and a 0-d result is a NumPy scalar."""
    def f(out, big, rev, ro, s):
        out += big * rev - ro
        return (out * s).sum()

    base = np.arange(5.0)
    ro = np.linspace(0, 1, 5)
    ro.flags.writeable = False
    args = lambda: (base.copy(), np.arange(5.0).astype(">f8"), np.arange(10.0)[::-2], ro,
                    np.float32(1.5))
    want_args, got_args = args(), args()
    want = f(*want_args)
    got = kiln.compile(f)(*got_args)
    assert type(got) is type(want) and got == want
    np.testing.assert_array_equal(got_args[0], want_args[0])


def test_array_sizes_that_change_become_symbolic():
    """An ndarray dim that changes between calls becomes symbolic (automatic dynamic, as for
    tensors): one recompile, then every length runs the same graph."""
    from kiln._capture.backend_compiled import CpuBackend

    backend = CpuBackend(fallback=False)
    f = kiln.compile(lambda x, y: np.sin(x) * 2.0 + y[: x.shape[0]], backend=backend)
    for n in range(10, 20):
        x, y = np.linspace(0, 1, n), np.arange(n + 3.0)
        np.testing.assert_allclose(f(x, y), np.sin(x) * 2.0 + y[:n], rtol=1e-15)
    assert len(backend.reports) == 2
