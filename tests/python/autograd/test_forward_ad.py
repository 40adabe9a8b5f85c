"""kiln.autograd.forward_ad (dual tensors) against torch.autograd.forward_ad."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.autograd.forward_ad as tfw  # noqa: E402

import kiln  # noqa: E402
import kiln.autograd.forward_ad as kfw  # noqa: E402

RNG = np.random.default_rng(11)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((4, 2))
TA = RNG.standard_normal((3, 4))
TB = RNG.standard_normal((4, 2))


def _run(lib, fw, program):
    with fw.dual_level():
        a = fw.make_dual(lib.tensor(A), lib.tensor(TA))
        b = fw.make_dual(lib.tensor(B), lib.tensor(TB))
        outs = program(lib, a, b)
        return [fw.unpack_dual(o) for o in outs]


def _check(program):
    ours = _run(kiln, kfw, program)
    theirs = _run(torch, tfw, program)
    for (kp, kt), (tp, tt) in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(kp.detach().numpy(), tp.detach().numpy(), rtol=1e-10)
        assert (kt is None) == (tt is None)
        if kt is not None:
            np.testing.assert_allclose(kt.numpy(), tt.numpy(), rtol=1e-9, atol=1e-12)


def test_tangents_of_a_composite_program_match_torch():
    def program(lib, a, b):
        h = (a @ b).tanh()
        s = (a.exp() * a.sigmoid()).softmax(-1)
        return [h, s.sum(0), (h * h).mean(), a.t().reshape(-1)[2:7] ** 3]

    _check(program)


def test_the_dual_itself_and_constants():
    def program(lib, a, b):
        return [a, lib.ones(2) * 3, b.sum() * 0 + 1]

    _check(program)


def test_layer_norm_and_log_softmax_tangents():
    def program(lib, a, b):
        y = lib.nn.functional.layer_norm(a, (4,))
        return [lib.nn.functional.log_softmax(y @ b, dim=-1), lib.relu(a - 0.1).max()]

    _check(program)


def test_a_primal_that_requires_grad_keeps_its_reverse_history():
    x = kiln.tensor(A, requires_grad=True)
    with kfw.dual_level():
        d = kfw.make_dual(x, kiln.tensor(TA))
        y = (d * d).sum()
        _, t = kfw.unpack_dual(y)
        np.testing.assert_allclose(t.item(), float((2 * A * TA).sum()))
        y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * A)


def test_tangents_end_with_the_level():
    with kfw.dual_level():
        d = kfw.make_dual(kiln.tensor(A), kiln.tensor(TA))
        y = d * 2
    assert kfw.unpack_dual(y).tangent is None
    assert kfw.unpack_dual(kiln.tensor(A)).tangent is None


def test_errors_in_torch_words():
    with pytest.raises(RuntimeError, match="no level exists"):
        kfw.make_dual(kiln.tensor(A), kiln.tensor(TA))
    with kfw.dual_level():
        with pytest.raises(RuntimeError, match="different size than that of the original"):
            kfw.make_dual(kiln.tensor(A), kiln.ones(2))
        with pytest.raises(ValueError, match="floating point"):
            kfw.make_dual(kiln.ones(2, dtype=kiln.int64), kiln.ones(2))
        with pytest.raises(RuntimeError, match="Nested forward mode AD"):
            kfw.enter_dual_level()


def test_tangents_through_a_write_into_a_view_equal_torch():
    x = np.random.default_rng(5).standard_normal((3, 4))
    tangents = []
    for m, fw in ((kiln, kfw), (torch, tfw)):
        with fw.dual_level():
            d = fw.make_dual(m.tensor(x), m.ones(3, 4, dtype=m.float64))
            y = d * 1
            y[0] = d[1] * 2  # CopySlices: its recorded backward differentiates again
            y[:, 2] *= d[:, 0].sin()
            tangents.append(fw.unpack_dual(y).tangent.numpy())
    np.testing.assert_allclose(tangents[0], tangents[1], rtol=1e-12)
