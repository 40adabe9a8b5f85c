"""Matrix products (matmul/mm/bmm/mv/dot/outer/addmm/addmv/baddbmm, F.linear, F.bilinear)
compared with torch on the same inputs."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT_DTYPES, INT_DTYPES, assert_close, make

import kiln
import kiln.nn.functional as KF

GEMM_DTYPES = FLOAT_DTYPES + INT_DTYPES


def pair(shape, dtype, seed=0):
    # Small integers keep integer products exact; int8/uint8 still wrap like torch.
    return make(shape, dtype, seed=seed, low=-2.0, high=2.0)


# ---- matmul over every rank combination ---------------------------------------------------------

MATMUL_SHAPES = [
    ((4,), (4,)),  # dot
    ((3, 4), (4,)),  # mv
    ((4,), (4, 5)),  # vector @ matrix
    ((3, 4), (4, 5)),  # mm
    ((2, 3, 4), (4,)),  # batched @ vector (folded)
    ((2, 3, 4), (4, 5)),  # batched @ matrix (folded)
    ((4,), (2, 4, 5)),  # vector @ batched
    ((2, 3, 4), (2, 4, 5)),  # bmm
    ((2, 1, 3, 4), (5, 4, 2)),  # broadcast batch dims
    ((1, 3, 4), (6, 4, 2)),
    ((3, 1, 2, 4), (1, 2, 4, 3)),
]


@pytest.mark.parametrize("dtype", GEMM_DTYPES)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_ranks_and_dtypes(sa, sb, dtype):
    ta, ka = pair(sa, dtype)
    tb, kb = pair(sb, dtype, seed=1)
    assert_close(kiln.matmul(ka, kb), torch.matmul(ta, tb))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_operator_and_method(dtype):
    ta, ka = pair((3, 4), dtype)
    tb, kb = pair((4, 2), dtype, seed=1)
    assert_close(ka @ kb, ta @ tb)
    assert_close(ka.matmul(kb), ta.matmul(tb))
    assert_close(kb.__rmatmul__(ka), tb.__rmatmul__(ta))


def test_matmul_with_non_tensor_is_type_error():
    _, ka = pair((2, 2), "float32")
    with pytest.raises(TypeError):
        ka @ 3  # noqa: B018
    with pytest.raises(TypeError):
        [[1.0]] @ ka  # noqa: B018


def noncontig_cases():
    # (torch, kiln) views with transposed, sliced and expanded strides.
    ta, ka = pair((6, 8), "float32")
    tb, kb = pair((8, 10), "float32", seed=1)
    tc, kc = pair((4, 5, 6), "float32", seed=2)
    yield (ta.t(), ka.t()), (ta, ka)  # a transposed contiguous matrix: BLAS Trans, no copy
    yield (ta, ka), (tb[:, ::2], kb[:, ::2])  # column-strided: needs a copy
    yield (ta[::2, 1:], ka[::2, 1:]), (tb[1:, ::3], kb[1:, ::3])
    yield (tc.transpose(1, 2), kc.transpose(1, 2)), (tc, kc)
    yield (tc.permute(2, 0, 1)[:, :, 1:], kc.permute(2, 0, 1)[:, :, 1:]), (ta[:4, :3], ka[:4, :3])
    yield (tc[:, :1].expand(4, 3, 6), kc[:, :1].expand(4, 3, 6)), (tb[:6, :2], kb[:6, :2])
    yield (ta[0], ka[0]), (tb[:, 3], kb[:, 3])  # strided vectors


@pytest.mark.parametrize("case", range(7))
def test_matmul_non_contiguous(case):
    (ta, ka), (tb, kb) = list(noncontig_cases())[case]
    if ta.shape[-1] != tb.shape[-2 if tb.dim() > 1 else 0]:
        ta, ka = ta.transpose(-1, -2), ka.transpose(-1, -2)
    assert_close(kiln.matmul(ka, kb), torch.matmul(ta, tb))


@pytest.mark.parametrize("dtype", ["int32", "int64", "float16"])
def test_matmul_non_contiguous_other_dtypes(dtype):
    ta, ka = pair((5, 6), dtype)
    tb, kb = pair((7, 5), dtype, seed=1)
    assert_close(kiln.matmul(ka.t()[::2], kb.t()), torch.matmul(ta.t()[::2], tb.t()))


@pytest.mark.parametrize(
    "sa,sb",
    [((0, 4), (4, 3)), ((3, 0), (0, 5)), ((3, 4), (4, 0)), ((0,), (0,)), ((2, 0, 3), (3, 4))],
)
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_matmul_zero_size(sa, sb, dtype):
    ta, ka = pair(sa, dtype)
    tb, kb = pair(sb, dtype, seed=1)
    assert_close(kiln.matmul(ka, kb), torch.matmul(ta, tb))


def test_integer_matmul_wraps_like_torch():
    ta = torch.full((2, 5), 100, dtype=torch.int8)
    tb = torch.full((5, 3), 3, dtype=torch.int8)
    ka, kb = kiln.from_numpy(ta.numpy().copy()), kiln.from_numpy(tb.numpy().copy())
    assert_close(ka @ kb, ta @ tb)
    ta64 = torch.full((2, 2), 2**62, dtype=torch.int64)
    ka64 = kiln.from_numpy(ta64.numpy().copy())
    assert_close(ka64 @ ka64, ta64 @ ta64)


def test_large_batched_matmul_uses_pool():
    # Enough small GEMMs that the batch runs over kiln's thread pool.
    ta, ka = pair((64, 16, 24), "float32")
    tb, kb = pair((64, 24, 8), "float32", seed=1)
    assert_close(kiln.bmm(ka, kb), torch.bmm(ta, tb))
    ta, ka = pair((200, 100), "float64")
    tb, kb = pair((100, 150), "float64", seed=1)
    assert_close(ka @ kb, ta @ tb)


# ---- the named products ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", GEMM_DTYPES)
def test_named_products(dtype):
    ta, ka = pair((3, 4), dtype)
    tb, kb = pair((4, 5), dtype, seed=1)
    tv, kv = pair((4,), dtype, seed=2)
    tw, kw = pair((3,), dtype, seed=3)
    t3, k3 = pair((2, 3, 4), dtype, seed=4)
    u3, q3 = pair((2, 4, 5), dtype, seed=5)
    assert_close(kiln.mm(ka, kb), torch.mm(ta, tb))
    assert_close(ka.mm(kb), ta.mm(tb))
    assert_close(kiln.bmm(k3, q3), torch.bmm(t3, u3))
    assert_close(k3.bmm(q3), t3.bmm(u3))
    assert_close(kiln.mv(ka, kv), torch.mv(ta, tv))
    assert_close(ka.mv(kv), ta.mv(tv))
    assert_close(kiln.dot(kv, kv), torch.dot(tv, tv))
    assert_close(kv.dot(kv), tv.dot(tv))
    assert_close(kiln.vdot(kv, kv), torch.vdot(tv, tv))
    assert_close(kiln.outer(kv, kw), torch.outer(tv, tw))
    assert_close(kiln.ger(kv, kw), torch.ger(tv, tw))
    assert_close(kv.outer(kw), tv.outer(tw))


def test_outer_promotes_and_accepts_bool():
    ta, ka = pair((3,), "float32")
    tb, kb = pair((4,), "int64", seed=1)
    assert_close(kiln.outer(ka, kb), torch.outer(ta, tb))
    tc, kc = make((3,), "bool")
    assert_close(kiln.outer(kc, kc), torch.outer(tc, tc))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64", "int16"])
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 3), (2, 0)])
def test_addmm_addmv_baddbmm(dtype, beta, alpha):
    if dtype in INT_DTYPES:
        beta, alpha = int(beta), int(alpha)
    tm, km = pair((3, 4), dtype)
    tn, kn = pair((4, 5), dtype, seed=1)
    ts, ks = pair((5,), dtype, seed=2)  # broadcasts over rows
    assert_close(
        kiln.addmm(ks, km, kn, beta=beta, alpha=alpha),
        torch.addmm(ts, tm, tn, beta=beta, alpha=alpha),
    )
    assert_close(ks.addmm(km, kn, alpha=alpha), ts.addmm(tm, tn, alpha=alpha))
    tv, kv = pair((4,), dtype, seed=3)
    tw, kw = pair((3,), dtype, seed=4)
    assert_close(
        kiln.addmv(kw, km, kv, beta=beta, alpha=alpha),
        torch.addmv(tw, tm, tv, beta=beta, alpha=alpha),
    )
    tb1, kb1 = pair((2, 3, 4), dtype, seed=5)
    tb2, kb2 = pair((2, 4, 5), dtype, seed=6)
    tc, kc = pair((3, 1), dtype, seed=7)
    assert_close(
        kiln.baddbmm(kc, kb1, kb2, beta=beta, alpha=alpha),
        torch.baddbmm(tc, tb1, tb2, beta=beta, alpha=alpha),
    )


def test_addmm_beta_zero_ignores_nan():
    ts = torch.full((2, 2), float("nan"))
    ks = kiln.from_numpy(ts.numpy().copy())
    tm, km = pair((2, 3), "float32")
    tn, kn = pair((3, 2), "float32", seed=1)
    assert_close(kiln.addmm(ks, km, kn, beta=0), torch.addmm(ts, tm, tn, beta=0))


def test_addmm_integer_with_float_scale_truncates_like_torch():
    tm, km = pair((3, 4), "int64")
    tn, kn = pair((4, 2), "int64", seed=1)
    ts, ks = pair((3, 2), "int64", seed=2)
    assert_close(
        kiln.addmm(ks, km, kn, beta=1.5, alpha=2.5), torch.addmm(ts, tm, tn, beta=1.5, alpha=2.5)
    )


# ---- F.linear / F.bilinear ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64"])
@pytest.mark.parametrize("in_shape", [(5,), (3, 5), (2, 3, 5), (2, 1, 3, 5), (0, 5)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear(dtype, in_shape, with_bias):
    tx, kx = pair(in_shape, dtype)
    tw, kw = pair((4, 5), dtype, seed=1)
    tb, kb = pair((4,), dtype, seed=2) if with_bias else (None, None)
    assert_close(KF.linear(kx, kw, kb), F.linear(tx, tw, tb))


def test_linear_non_contiguous_and_vector_weight():
    tx, kx = pair((5, 3, 4), "float32")
    tw, kw = pair((5, 6), "float32", seed=1)
    tb, kb = pair((6,), "float32", seed=2)
    # input transposed, weight given as a transposed view
    assert_close(
        KF.linear(kx.transpose(0, 1), kw.t()[:, :4], kb),
        F.linear(tx.transpose(0, 1), tw.t()[:, :4], tb),
    )
    tv, kv = pair((4,), "float32", seed=3)
    assert_close(KF.linear(kx, kv), F.linear(tx, tv))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("lead", [(4,), (2, 3), ()])
def test_bilinear(dtype, lead):
    t1, k1 = pair(lead + (3,), dtype)
    t2, k2 = pair(lead + (5,), dtype, seed=1)
    tw, kw = pair((6, 3, 5), dtype, seed=2)
    tb, kb = pair((6,), dtype, seed=3)
    assert_close(KF.bilinear(k1, k2, kw, kb), F.bilinear(t1, t2, tw, tb))
    assert_close(kiln.bilinear(k1, k2, kw), torch.bilinear(t1, t2, tw))


# ---- errors ------------------------------------------------------------------------------------


def k(shape, dtype="float32"):
    return make(shape, dtype)[1]


@pytest.mark.parametrize(
    "fn,exc,match",
    [
        (lambda: kiln.matmul(k(()), k((3,))), RuntimeError, "at least 1D.*0D and 1D"),
        (
            lambda: kiln.matmul(k((2, 3)), k((4, 2))),
            RuntimeError,
            r"cannot be multiplied \(2x3 and 4x2\)",
        ),
        (lambda: kiln.matmul(k((3,)), k((4,))), RuntimeError, "inconsistent tensor size"),
        (lambda: kiln.matmul(k((2, 3)), k((4,))), RuntimeError, r"size mismatch.*2x3.*vec \(4\)"),
        (lambda: kiln.matmul(k((2, 2, 3)), k((3, 3, 2))), RuntimeError, r"\[2\] and \[3\]"),
        (
            lambda: kiln.matmul(k((2, 3)), k((3, 2), "float64")),
            RuntimeError,
            "same dtype.*float32 != float64",
        ),
        (
            lambda: kiln.matmul(k((2, 3), "bool"), k((3, 2), "bool")),
            NotImplementedError,
            "not implemented for 'Bool'",
        ),
        (lambda: kiln.mm(k((3,)), k((3, 2))), RuntimeError, "self must be a matrix"),
        (
            lambda: kiln.mm(k((2, 3)), k((2, 3))),
            RuntimeError,
            r"cannot be multiplied \(2x3 and 2x3\)",
        ),
        (lambda: kiln.bmm(k((2, 3)), k((3, 2))), RuntimeError, "batch1 must be a 3D tensor"),
        (
            lambda: kiln.bmm(k((2, 2, 3)), k((3, 3, 2))),
            RuntimeError,
            r"batch2 tensor to be: \[2, 3\]",
        ),
        (lambda: kiln.mv(k((3,)), k((3,))), RuntimeError, "2-D matrix and a 1-D vector"),
        (
            lambda: kiln.dot(k((3, 1)), k((3,))),
            RuntimeError,
            "1D tensors expected, but got 2D and 1D",
        ),
        (lambda: kiln.dot(k((3,)), k((3,), "float64")), RuntimeError, "same dtype"),
        (lambda: kiln.dot(k((3,), "bool"), k((3,), "bool")), NotImplementedError, "'Bool'"),
        (lambda: kiln.outer(k((3, 1)), k((3,))), RuntimeError, "Expected 1-D argument self"),
        (
            lambda: kiln.addmm(k((3,)), k((2, 3)), k((3, 2))),
            RuntimeError,
            r"\[3\].*cannot be expanded.*\[2, 2\]",
        ),
        (
            lambda: kiln.addmm(k((2, 2), "float64"), k((2, 3)), k((3, 2))),
            RuntimeError,
            "same dtype",
        ),
        (lambda: KF.linear(k((2, 3)), k((4, 5))), RuntimeError, "cannot be multiplied"),
        (lambda: KF.linear(k((2, 3)), k((4, 3), "float64")), RuntimeError, "same dtype"),
        (lambda: KF.linear(k((2, 3)), k((4, 3)), k((3,))), RuntimeError, "cannot be expanded"),
        (lambda: KF.linear(k((2, 3)), k((3,)), k(())), RuntimeError, "1-D weight"),
        (
            lambda: KF.bilinear(k((4, 3)), k((3, 5)), k((6, 3, 5))),
            RuntimeError,
            "batch dimensions do not match",
        ),
        (
            lambda: KF.bilinear(k((4, 2)), k((4, 5)), k((6, 3, 5))),
            RuntimeError,
            "input1 size does not match",
        ),
    ],
)
def test_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_inplace_add_products(dtype):
    tm, km = pair((3, 4), dtype)
    tn, kn = pair((4, 5), dtype, seed=1)
    ts, ks = pair((3, 5), dtype, seed=2)
    out = ks.addmm_(km, kn, beta=2, alpha=3)
    assert out is ks
    assert_close(ks, ts.addmm_(tm, tn, beta=2, alpha=3))
    tv, kv = pair((4,), dtype, seed=3)
    tw, kw = pair((3,), dtype, seed=4)
    assert_close(kw.addmv_(km, kv), tw.addmv_(tm, tv))
    tb1, kb1 = pair((2, 3, 4), dtype, seed=5)
    tb2, kb2 = pair((2, 4, 5), dtype, seed=6)
    tc, kc = pair((2, 3, 5), dtype, seed=7)
    assert_close(kc.baddbmm_(kb1, kb2, alpha=2), tc.baddbmm_(tb1, tb2, alpha=2))
    with pytest.raises(RuntimeError):
        pair((5,), dtype)[1].addmm_(km, kn)  # the result does not fit in self's shape


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batched_matmul_layouts_match_torch(dtype):
    # Evenly spaced batches run as one strided-batch BLAS call (when the BLAS has one); sliced,
    # broadcast and transposed batches must give the same products as torch either way.
    rng = np.random.default_rng(4)
    base_a = rng.standard_normal((4, 5, 6, 3)).astype(dtype)
    base_b = rng.standard_normal((4, 5, 3, 7)).astype(dtype)
    ka, kb = kiln.tensor(base_a), kiln.tensor(base_b)
    ta, tb = torch.tensor(base_a), torch.tensor(base_b)
    tol = 1e-5 if dtype == "float32" else 1e-12
    pairs = [
        (lambda x, y: x @ y),  # evenly spaced
        (lambda x, y: x[:, 1:4] @ y[:, 1:4]),  # two batch dims, one sliced: uneven offsets
        (lambda x, y: x[:, :1] @ y),  # broadcast batch
        (lambda x, y: x.transpose(-1, -2).contiguous().transpose(-1, -2) @ y),  # transposed
        (lambda x, y: x[::2] @ y[::2]),  # every other matrix
        (lambda x, y: torch_or_kiln(x).baddbmm(x[0, :2] @ y[0, :2], x[1, :2], y[1, :2], beta=0.5)),
    ]
    for f in pairs:
        np.testing.assert_allclose(f(ka, kb).numpy(), f(ta, tb).numpy(), rtol=tol, atol=tol)


def torch_or_kiln(t):
    return kiln if isinstance(t, kiln.Tensor) else torch
