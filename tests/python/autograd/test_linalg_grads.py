"""Gradients of the products without a kernel of their own in autograd: einsum (every form:
implicit and explicit outputs, ellipsis broadcasting, labels summed in one operand, three
operands), mv, dot, vdot, outer/ger, addmv, baddbmm and bilinear, against torch's. Before, these
returned results that did not require grad: the gradient silently stopped there."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import grad_pair as pair  # noqa: E402

import kiln  # noqa: E402


def check(fn_t, fn_k, *shapes):
    ts, ks = zip(*[pair(*s, seed=i) for i, s in enumerate(shapes)], strict=True)
    out_t, out_k = fn_t(*ts), fn_k(*ks)
    assert out_k.requires_grad
    w = np.random.default_rng(99).standard_normal(tuple(out_t.shape))
    (out_t * torch.tensor(w)).sum().backward()
    (out_k * kiln.tensor(w)).sum().backward()
    np.testing.assert_allclose(out_k.detach().numpy(), out_t.detach().numpy(), rtol=1e-10)
    for t, k in zip(ts, ks, strict=True):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->", [(5,), (5,)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),  # ellipsis of different widths
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),  # broadcast size-1 ellipsis dim
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("ik,jk->ij", [(3, 6), (4, 6)]),
    ("ijk,k->", [(2, 3, 4), (4,)]),
    ("abc,cd->abd", [(2, 1, 3), (3, 4)]),
    ("Bi,iJ->BJ", [(3, 4), (4, 2)]),  # uppercase labels
]


@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_gradient(equation, shapes):
    check(lambda *xs: torch.einsum(equation, *xs), lambda *xs: kiln.einsum(equation, *xs),
          *shapes)


def test_einsum_sublist_form_gradient():
    check(lambda a, b: torch.einsum(a, [0, 1], b, [1, 2], [0, 2]),
          lambda a, b: kiln.einsum(a, [0, 1], b, [1, 2], [0, 2]), (3, 4), (4, 2))


def test_einsum_diagonal_derivative_is_refused_not_wrong():
    _, k = pair(3, 3)
    out = kiln.einsum("ii->i", k)
    with pytest.raises(NotImplementedError, match="repeated index"):
        out.sum().backward()


def test_einsum_without_grad_stays_a_plain_kernel():
    _, k = pair(3, 4)
    with kiln.no_grad():
        assert kiln.einsum("ij->j", k).grad_fn is None


@pytest.mark.parametrize("name", ["mv", "dot", "vdot", "outer", "ger"])
def test_vector_product_gradients(name):
    shapes = {"mv": [(3, 4), (4,)], "outer": [(3,), (4,)], "ger": [(3,), (4,)]}.get(
        name, [(5,), (5,)])
    check(lambda a, b: getattr(torch, name)(a, b), lambda a, b: getattr(kiln, name)(a, b),
          *shapes)
    check(lambda a, b: getattr(a, name)(b), lambda a, b: getattr(a, name)(b), *shapes)


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1.5)])
def test_add_product_gradients(beta, alpha):
    check(lambda s, m, v: torch.addmv(s, m, v, beta=beta, alpha=alpha),
          lambda s, m, v: kiln.addmv(s, m, v, beta=beta, alpha=alpha), (3,), (3, 4), (4,))
    check(lambda s, a, b: torch.baddbmm(s, a, b, beta=beta, alpha=alpha),
          lambda s, a, b: kiln.baddbmm(s, a, b, beta=beta, alpha=alpha), (1, 3, 5), (2, 3, 4),
          (2, 4, 5))


@pytest.mark.parametrize("lead", [(6,), (2, 3)], ids=["batch", "two_lead_dims"])
def test_bilinear_gradient(lead):
    check(lambda a, b, w, c: torch.nn.functional.bilinear(a, b, w, c),
          lambda a, b, w, c: kiln.nn.functional.bilinear(a, b, w, c),
          (*lead, 4), (*lead, 3), (5, 4, 3), (5,))
    check(lambda a, b, w: torch.nn.functional.bilinear(a, b, w),
          lambda a, b, w: kiln.nn.functional.bilinear(a, b, w), (*lead, 4), (*lead, 3),
          (2, 4, 3))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_gradient(indexing):
    check(lambda a, b, c: sum(g * (k + 1) for k, g in enumerate(torch.meshgrid(a, b, c,
                                                                                indexing=indexing))),
          lambda a, b, c: sum(g * (k + 1) for k, g in enumerate(kiln.meshgrid(a, b, c,
                                                                              indexing=indexing))),
          (3,), (4,), (2,))
