"""kiln.einsum against torch.einsum: explicit and implicit outputs, diagonals, ellipsis
broadcasting, several operands, the list and sublist call forms, and torch's error cases."""

import pytest
import torch
from conftest import assert_close, make

import kiln

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("iij->j", [(3, 3, 2)]),
    ("bi,bi->b", [(3, 5), (3, 5)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ik,kj,il->jl", [(2, 3), (3, 4), (2, 5)]),
    ("i,i,i->i", [(4,), (4,), (4,)]),
    ("...ij,...jk->...ik", [(5, 2, 3), (3, 2)]),
    ("...ij,...jk", [(2, 1, 2, 3), (4, 3, 2)]),
    ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("...i->...", [(2, 3, 4)]),
    ("i...->...", [(2, 3, 4)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("ij,jk->ik", [(2, 1), (3, 2)]),  # a size-1 contracted dim broadcasts
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),  # a size-1 batch dim broadcasts
    ("Ab,bC->AC", [(3, 4), (4, 2)]),
    ("->", [()]),
    ("i j , j k -> i k", [(3, 4), (4, 5)]),
    ("ij,jk->ik", [(0, 4), (4, 5)]),
    ("ij,jk->ik", [(3, 0), (0, 5)]),
]


@pytest.mark.parametrize("eq,shapes", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_einsum_matches_torch(eq, shapes, dtype):
    pairs = [make(s, dtype, seed=i) for i, s in enumerate(shapes)]
    t_ops = [p[0] for p in pairs]
    k_ops = [p[1] for p in pairs]
    assert_close(kiln.einsum(eq, *k_ops), torch.einsum(eq, *t_ops))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int64", "int32"])
@pytest.mark.parametrize("eq,shapes", [CASES[0], CASES[3], CASES[8], CASES[17]])
def test_einsum_dtypes(eq, shapes, dtype):
    pairs = [make(s, dtype, seed=i, low=-2, high=2) for i, s in enumerate(shapes)]
    assert_close(kiln.einsum(eq, *[p[1] for p in pairs]), torch.einsum(eq, *[p[0] for p in pairs]))


def test_einsum_integer_sum_widens_to_int64_like_torch():
    t, kt = make((3, 4), "int8")
    assert_close(kiln.einsum("ij->", kt), torch.einsum("ij->", t))
    assert_close(kiln.einsum("ij->i", kt), torch.einsum("ij->i", t))


def test_einsum_non_contiguous_operands():
    ta, ka = make((4, 6), "float32")
    tb, kb = make((5, 6, 3), "float32", seed=1)
    assert_close(
        kiln.einsum("ij,bjk->bik", ka.t()[::2], kb.transpose(0, 2)[:, :4]),
        torch.einsum("ij,bjk->bik", ta.t()[::2], tb.transpose(0, 2)[:, :4]),
    )


def test_einsum_list_and_sublist_forms():
    ta, ka = make((3, 4), "float32")
    tb, kb = make((4, 5), "float32", seed=1)
    assert_close(kiln.einsum("ij,jk->ik", [ka, kb]), torch.einsum("ij,jk->ik", [ta, tb]))
    assert_close(
        kiln.einsum(ka, [0, 1], kb, [1, 2], [0, 2]), torch.einsum(ta, [0, 1], tb, [1, 2], [0, 2])
    )
    assert_close(kiln.einsum(ka, [0, 1], kb, [1, 2]), torch.einsum(ta, [0, 1], tb, [1, 2]))
    assert_close(
        kiln.einsum(ka, [Ellipsis, 1], [Ellipsis]), torch.einsum(ta, [Ellipsis, 1], [Ellipsis])
    )


def k(shape, dtype="float32"):
    return make(shape, dtype)[1]


@pytest.mark.parametrize(
    "args,exc,match",
    [
        (("ij,jk->ik", k((2, 3)), k((4, 2))), RuntimeError, "subscript j has size 4 for operand 1"),
        (("ij,jk", k((2, 3))), RuntimeError, "fewer operands"),
        (("ij", k((2, 3)), k((2, 3))), RuntimeError, "more operands"),
        (("ij->k", k((2, 3))), RuntimeError, "output subscript k does not appear"),
        (("ijk->ij", k((2, 3))), RuntimeError, r"number of subscripts in the equation \(3\)"),
        (("ii->i", k((2, 3))), RuntimeError, "subscript i is repeated.*3 != 2"),
        (("ij->ii", k((2, 2))), RuntimeError, "appears more than once in the output"),
        (("i1,1k->ik", k((2, 3)), k((3, 4))), RuntimeError, "invalid subscript given at index 1"),
        (("...i...->i", k((2, 2))), RuntimeError, "ellipsis was already found"),
        (("i.j->i", k((2, 2))), RuntimeError, "not part of any ellipsis"),
        (("ij,jk->ik", k((2, 3)), k((3, 2), "float64")), RuntimeError, "same dtype"),
        (("ij,jk->ik", k((2, 3), "bool"), k((3, 2), "bool")), NotImplementedError, "'Bool'"),
    ],
)
def test_einsum_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        kiln.einsum(*args)
