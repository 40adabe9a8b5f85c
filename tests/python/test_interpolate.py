"""F.interpolate against torch: nearest, nearest-exact, (bi/tri)linear and bicubic with and
without align_corners, area; size= and scale_factor= (with recompute_scale_factor); 3-D to 5-D
inputs; antialias for bilinear and bicubic."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import FLOAT_DTYPES, assert_close, make

import kiln
import kiln.nn.functional as KF

LINEAR_MODE = {1: "linear", 2: "bilinear", 3: "trilinear"}
SHAPES = [(2, 3, 5), (2, 3, 5, 7), (1, 2, 3, 4, 5)]


def size_args(nd):
    return [
        {"size": 9},
        {"size": (3, 8, 4)[:nd]},
        {"size": (5, 7, 3)[:nd]},  # output == input along some axes
        {"scale_factor": 2},
        {"scale_factor": 1.7},
        {"scale_factor": 0.6},
        {"scale_factor": (0.5, 2.3, 1.5)[:nd]},
        {"scale_factor": 1.7, "recompute_scale_factor": True},
    ]


def run_both(tx, kx, **kw):
    assert_close(KF.interpolate(kx, **kw), F.interpolate(tx, **kw))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["uint8"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest(dtype, shape, mode):
    tx, kx = make(shape, dtype)
    for kw in size_args(len(shape) - 2):
        run_both(tx, kx, mode=mode, **kw)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_linear_modes(dtype, shape, align_corners):
    tx, kx = make(shape, dtype)
    mode = LINEAR_MODE[len(shape) - 2]
    for kw in size_args(len(shape) - 2):
        run_both(tx, kx, mode=mode, align_corners=align_corners, **kw)


@pytest.mark.parametrize("align_corners", [False, True])
def test_bilinear_uint8(align_corners):
    # torch blends uint8 with fixed-point weights, kiln in float32: equal up to one unit.
    tx, kx = make((2, 3, 6, 7), "uint8")
    for kw in [{"size": (9, 5)}, {"scale_factor": 1.5}]:
        kw.update(mode="bilinear", align_corners=align_corners)
        assert_close(KF.interpolate(kx, **kw), F.interpolate(tx, **kw), atol=1, rtol=0)


@pytest.mark.parametrize("shape", SHAPES)
def test_area(shape):
    tx, kx = make(shape, "float32")
    for kw in [{"size": 3}, {"scale_factor": 0.5}, {"size": (2, 7, 3)[: len(shape) - 2]}]:
        run_both(tx, kx, mode="area", **kw)


def test_non_contiguous_and_empty_batch():
    tx, kx = make((4, 3, 6, 8), "float32")
    tv, kv = tx.permute(1, 0, 3, 2)[:, ::2], kx.permute(1, 0, 3, 2)[:, ::2]
    run_both(tv, kv, size=(5, 9), mode="bilinear")
    run_both(tv, kv, scale_factor=1.5, mode="nearest")
    tx, kx = make((0, 3, 6, 8), "float32")
    run_both(tx, kx, size=(3, 4), mode="bilinear", align_corners=True)


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample")
def test_upsample_aliases():
    tx, kx = make((1, 2, 3, 4), "float32")
    assert_close(KF.upsample(kx, scale_factor=2), F.upsample(tx, scale_factor=2))
    assert_close(KF.upsample_nearest(kx, size=(5, 5)), F.upsample_nearest(tx, size=(5, 5)))
    assert_close(KF.upsample_bilinear(kx, size=(5, 5)), F.upsample_bilinear(tx, size=(5, 5)))


def k(shape, dtype="float32"):
    return make(shape, dtype)[1]


@pytest.mark.parametrize(
    "fn,exc,match",
    [
        (
            lambda: KF.interpolate(k((1, 1, 4, 4)), size=2, scale_factor=2),
            ValueError,
            "only one of size or scale_factor",
        ),
        (lambda: KF.interpolate(k((1, 1, 4, 4))), ValueError, "either size or scale_factor"),
        (
            lambda: KF.interpolate(k((1, 1, 4, 4)), size=2, mode="foo"),
            NotImplementedError,
            r"\(got foo\)",
        ),
        (
            lambda: KF.interpolate(k((1, 1, 4)), size=2, mode="bilinear"),
            NotImplementedError,
            "Got 3D input, but bilinear mode needs 4D input",
        ),
        (
            lambda: KF.interpolate(k((1, 1, 4, 4)), size=2, align_corners=True),
            ValueError,
            "align_corners option can only be set",
        ),
        (
            lambda: KF.interpolate(k((1, 1, 4, 4)), size=(2, 2, 2)),
            ValueError,
            "same number of spatial dimensions",
        ),
        (
            lambda: KF.interpolate(k((1, 1, 4, 4)), scale_factor=(2, 3, 4)),
            ValueError,
            "same number of spatial dimensions",
        ),
        (lambda: KF.interpolate(k((2, 5)), size=3), NotImplementedError, r"got 2D"),
        (
            lambda: KF.interpolate(k((1, 2, 0, 5)), size=3),
            RuntimeError,
            r"sizes should be greater than 0, but got input \(H: 0, W: 5\)",
        ),
        (
            lambda: KF.interpolate(k((1, 2, 4, 5)), size=-1),
            RuntimeError,
            r"output \(H: -1, W: -1\)",
        ),
        (lambda: KF.interpolate(k((1, 2, 4, 5), "int64"), size=3), NotImplementedError, "'Long'"),
        (
            lambda: KF.interpolate(k((1, 2, 4), "uint8"), size=3, mode="linear"),
            NotImplementedError,
            "'Byte'",
        ),
        (
            lambda: KF.interpolate(k((1, 2, 4)), size=3, mode="bicubic"),
            NotImplementedError,
            "Got 3D input, but bicubic mode needs 4D input",
        ),
        (
            lambda: KF.interpolate(k((1, 2, 4, 4), "int64"), size=3, mode="bicubic"),
            NotImplementedError,
            "'Long'",
        ),
        (
            lambda: KF.interpolate(k((1, 2, 4, 4)), size=3, recompute_scale_factor=True),
            ValueError,
            "not meaningful",
        ),
    ],
)
def test_interpolate_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_interpolate_matches_torch_for_large_odd_sizes():
    tx, kx = make((1, 2, 33, 47), "float32")
    run_both(tx, kx, size=(61, 29), mode="bilinear")
    run_both(tx, kx, scale_factor=(1.37, 0.71), mode="bilinear", align_corners=True)
    run_both(tx, kx, scale_factor=3.3, mode="nearest")


@pytest.mark.parametrize("shape", [(1, 2, 3), (1, 2, 3, 2), (1, 2, 2, 3, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_scale_that_keeps_the_size(shape, dtype, mode):
    # floor(in * 1.3) == in for in <= 3: torch's 2-D kernel then copies, its 1-D/3-D kernels
    # still map through 1 / 1.3; kiln follows both.
    tx, kx = make(shape, dtype)
    run_both(tx, kx, mode=mode, scale_factor=1.3)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_bicubic(dtype, align_corners):
    tx, kx = make((2, 3, 5, 7), dtype)
    for kw in size_args(2):
        run_both(tx, kx, mode="bicubic", align_corners=align_corners, **kw)


def test_bicubic_gradient_and_compiled_matches():
    """The bicubic composition differentiates (against torch's gradient), and kiln.compile
    writes the same composition as graph nodes: eager's values, with no eager node (area mode
    compiles too, as adaptive average pooling)."""
    import numpy as np
    import torch

    import kiln
    from kiln._capture.backend_compiled import CpuBackend

    t = torch.randn(2, 3, 6, 5, dtype=torch.float64, requires_grad=True)
    x = kiln.from_numpy(t.detach().numpy()).requires_grad_()
    kw = {"size": (9, 4), "mode": "bicubic", "align_corners": False}
    g = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    F.interpolate(t, **kw).backward(g)
    KF.interpolate(x, **kw).backward(kiln.from_numpy(g.numpy()))
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)

    def fn(v):
        up = KF.interpolate(v * 2, scale_factor=(1.5, 2.0), mode="bicubic").relu() + 1
        return up, KF.interpolate(v, size=(3, 2), mode="area")

    kiln.compiler.reset()
    backend = CpuBackend(fallback=False)
    with kiln.no_grad():
        for dtype in (kiln.float32, kiln.float64, kiln.float16):
            v = kiln.randn(1, 2, 6, 5).to(dtype)
            for got, want in zip(kiln.compile(fn, backend=backend)(v), fn(v), strict=True):
                assert kiln.equal(got, want)
    assert all(r.eager_nodes == 0 and len(r.parts) == 1 for r in backend.reports)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("kwargs", [{"size": (13, 7)}, {"size": (20, 17)}, {"scale_factor": 0.37},
                                    {"scale_factor": (0.5, 2.3)},
                                    {"size": (5, 5), "align_corners": True}],
                         ids=str)
def test_antialias_matches_torch_with_gradients(mode, kwargs):
    # timm's resample_abs_pos_embed resizes a ViT's position embedding with antialias=True
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 12)).astype(np.float32)
    grads = {}
    outs = {}
    for lib in (torch, kiln):
        t = lib.tensor(x, requires_grad=True)
        out = lib.nn.functional.interpolate(t, mode=mode, antialias=True, **kwargs)
        (out * lib.arange(float(out.numel())).reshape(out.shape)).sum().backward()
        outs[lib.__name__], grads[lib.__name__] = out.detach().numpy(), t.grad.numpy()
    np.testing.assert_allclose(outs["kiln"], outs["torch"], rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(grads["kiln"], grads["torch"], rtol=1e-4, atol=1e-3)


def test_antialias_inside_compiled_code_and_its_errors():
    x = kiln.randn(1, 2, 16, 16)

    def resize(t):
        return kiln.nn.functional.interpolate(t, size=(6, 6), mode="bicubic", antialias=True) * 2

    assert kiln.allclose(kiln.compile(resize)(x), resize(x), atol=1e-6)
    with pytest.raises(NotImplementedError, match="restricted to bilinear and bicubic"):
        kiln.nn.functional.interpolate(x, size=(6, 6), mode="nearest", antialias=True)
    with pytest.raises(NotImplementedError, match="restricted to bilinear and bicubic"):
        kiln.nn.functional.interpolate(kiln.randn(1, 2, 8), size=4, mode="linear",
                                       antialias=True)
