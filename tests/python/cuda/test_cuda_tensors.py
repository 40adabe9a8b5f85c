"""CUDA tensors: moves, factories, eager ops as cached one-node graphs, in-place writes, memory
and errors, each checked against the same computation on the CPU."""

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F

# These run where kiln has a CUDA device: a GPU, or the host emulator (KILN_CUDA_EMULATOR=1,
# which scripts/test.sh sets for a second pytest run of this folder).
pytestmark = pytest.mark.skipif(not kiln.cuda.is_available(),
                                reason="no CUDA device (run with KILN_CUDA_EMULATOR=1)")

def host(t):
    assert t.device == "cuda:0"
    return t.cpu().numpy()


def rand(*shape, seed=0, dtype=np.float32):
    return kiln.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float16, kiln.int64, kiln.bool])
def test_round_trip_keeps_every_byte(dtype):
    x = (rand(3, 5) * 100).to(dtype)
    c = x.to("cuda")
    assert c.is_cuda and c.device == "cuda:0" and not c.is_cpu
    assert c.dtype == dtype and c.shape == x.shape
    back = c.cpu()
    assert back.device == "cpu"
    np.testing.assert_array_equal(back.numpy(), x.numpy())


def test_moves_are_no_ops_when_already_there_and_copies_otherwise():
    x = rand(4)
    c = x.cuda()
    assert c.cuda() is c and c.to("cuda:0") is c and x.cpu() is x
    assert c.to("cuda", copy=True) is not c
    assert x.to("cuda", kiln.float64).dtype == kiln.float64


def test_non_contiguous_sources_and_results():
    x = rand(4, 6)
    c = x.t().cuda()  # made contiguous on the host, then uploaded
    assert c.is_contiguous()
    np.testing.assert_array_equal(host(c), x.numpy().T)
    t = x.cuda().t()  # a view on the device: downloading it needs a gather kernel
    assert not t.is_contiguous()
    np.testing.assert_array_equal(host(t), x.numpy().T)
    np.testing.assert_array_equal(host(x.cuda()[1:3, ::2].contiguous()), x.numpy()[1:3, ::2])


def test_factories_on_cuda():
    np.testing.assert_array_equal(host(kiln.zeros(2, 3, device="cuda")), np.zeros((2, 3)))
    np.testing.assert_array_equal(host(kiln.ones(4, device="cuda:0")), np.ones(4))
    np.testing.assert_array_equal(host(kiln.full((2,), 7.5, device="cuda")), [7.5, 7.5])
    np.testing.assert_array_equal(host(kiln.tensor([[1, 2]], device="cuda")), [[1, 2]])
    kiln.manual_seed(3)
    a = kiln.randn(5, device="cuda")
    kiln.manual_seed(3)
    np.testing.assert_array_equal(host(a), kiln.randn(5).numpy())  # one generator stream
    c = rand(2, 2).cuda()
    for like in (kiln.zeros_like(c), kiln.ones_like(c), kiln.empty_like(c), c.new_zeros(3)):
        assert like.device == "cuda:0"
    assert kiln.zeros_like(c, device="cpu").device == "cpu"
    np.testing.assert_array_equal(host(kiln.ones_like(c)), np.ones((2, 2)))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, y: x + y * 2,
        lambda x, y: (x - 1.5) / (y.abs() + 1),
        lambda x, y: kiln.maximum(x, y).relu(),
        lambda x, y: x.exp() * y.sigmoid() + x.tanh(),
        lambda x, y: F.gelu(x) + F.silu(y),
        lambda x, y: kiln.where(x > y, x, -y),
        lambda x, y: (x >= 0) == (y < 0),
        lambda x, y: x.half() * y.half(),
    ],
)
def test_elementwise_ops_match_the_cpu(fn):
    x, y = rand(5, 7, seed=1), rand(7, seed=2)  # y broadcasts
    want = fn(x, y)
    got = fn(x.cuda(), y.cuda())
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = 1e-2 if want.dtype == kiln.float16 else 1e-5
    np.testing.assert_allclose(host(got).astype(np.float64), want.numpy().astype(np.float64),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.sum(-1),
        lambda x: x.mean(0, keepdim=True),
        lambda x: x.amax(1),
        lambda x: x.argmax(-1),
        lambda x: x.var(1),
        lambda x: x.softmax(-1),
        lambda x: F.log_softmax(x, 0),
        lambda x: F.layer_norm(x, (33,)),
        lambda x: x.logsumexp(-1),
        lambda x: x.sum(),
    ],
)
def test_reductions_match_the_cpu(fn):
    x = rand(6, 33, seed=4)
    want, got = fn(x), fn(x.cuda())
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(host(got), want.numpy(), rtol=1e-4, atol=1e-5)


def test_matmul_and_linear_match_the_cpu():
    x, w, b = rand(5, 8, seed=5), rand(3, 8, seed=6), rand(3, seed=7)
    np.testing.assert_allclose(host(x.cuda() @ w.cuda().t()), (x @ w.t()).numpy(), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(host(F.linear(x.cuda(), w.cuda(), b.cuda())),
                               F.linear(x, w, b).numpy(), rtol=1e-5, atol=1e-5)


def test_in_place_writes():
    x = rand(3, 4, seed=8)
    c = x.cuda()
    c.add_(1.0)
    c.mul_(kiln.full((4,), 2.0, device="cuda"))
    c[:, 1] = 7.0  # a strided destination
    c[0].zero_()
    want = (x + 1.0) * 2.0
    want[:, 1] = 7.0
    want[0] = 0.0
    np.testing.assert_allclose(host(c), want.numpy(), rtol=1e-6)


def test_eager_programs_are_cached_per_signature():
    a, b = rand(3, 4).cuda(), rand(4).cuda()
    (a * b + 0.5).sum(-1)
    before = kiln.cuda._eager_programs_compiled()
    # Other sizes and scalar values with the same broadcast pattern reuse the programs.
    c, d = rand(9, 5).cuda(), rand(5).cuda()
    out = (c * d + 0.25).sum(-1)
    assert kiln.cuda._eager_programs_compiled() == before
    want = (rand(9, 5) * rand(5) + 0.25).sum(-1)
    np.testing.assert_allclose(host(out), want.numpy(), rtol=1e-5)
    (c.atan() - c.sinh()).amin(0)  # a new pattern compiles
    assert kiln.cuda._eager_programs_compiled() > before


def test_scalars_item_and_repr():
    c = kiln.tensor([1.5, -2.0], device="cuda")
    assert float(c.sum()) == -0.5
    assert c[0].item() == 1.5
    assert bool(c[0] > 0)
    assert repr(c) == "tensor([ 1.5000, -2.0000], device='cuda:0')"
    assert c.tolist() == [1.5, -2.0]
    np.testing.assert_array_equal(c.numpy(force=True), [1.5, -2.0])


def test_memory_accounting():
    kiln.cuda.synchronize()
    base = kiln.cuda.memory_allocated()
    t = kiln.empty(1 << 20, device="cuda")
    assert kiln.cuda.memory_allocated() >= base + (4 << 20)
    assert kiln.cuda.memory_reserved() >= kiln.cuda.memory_allocated()
    del t
    assert kiln.cuda.memory_allocated() == base
    kiln.cuda.empty_cache()
    assert kiln.cuda.memory_reserved() >= kiln.cuda.memory_allocated()


def test_errors_name_the_problem():
    c, x = rand(3).cuda(), rand(3)
    with pytest.raises(RuntimeError, match="expected all tensors to be on the same device"):
        c + x
    np.testing.assert_allclose(host(c + kiln.tensor(2.0)), (rand(3) + 2).numpy())  # 0-d cpu ok
    with pytest.raises(RuntimeError, match=r"no CUDA implementation yet .*\.cpu\(\) first"):
        c.float_power(2.0)  # a CPU kernel of its own, not a graph op
    np.testing.assert_allclose(host(c.sin()), rand(3).sin().numpy(), rtol=1e-6)  # a table op
    with pytest.raises(RuntimeError, match=r"use \.cpu\(\) first"):
        c.numpy()
    with pytest.raises(RuntimeError, match="CUDA device 5 does not exist"):
        x.to("cuda:5")
    with pytest.raises(NotImplementedError, match="rounding_mode='floor'"):
        kiln.div(c, 2, rounding_mode="floor")
    with pytest.raises(RuntimeError, match="no CUDA implementation yet"):
        c.logcumsumexp(0)  # a CPU kernel never reads device memory
    assert kiln.cuda.get_device_name()
    assert kiln.cuda.get_device_capability()[0] >= 7


def test_sorts_scans_gathers_and_class_losses_match_the_cpu():
    x, t, w = kiln.randn(4, 9), kiln.randint(0, 9, (4,)), kiln.rand(9) + 0.5
    cases = [
        lambda x, t, w: x.sort(-1, descending=True),
        lambda x, t, w: x.topk(3, dim=0, largest=False),
        lambda x, t, w: (x.argsort(-1), x.cumsum(1), x.cumprod(0)),
        lambda x, t, w: (x.gather(1, t[:, None]), x.index_select(1, t)),
        lambda x, t, w: (F.cross_entropy(x, t, w, label_smoothing=0.2),
                         F.nll_loss(x.log_softmax(-1), t, reduction="none")),
    ]
    for fn in cases:
        want, got = fn(x, t, w), fn(x.cuda(), t.cuda(), w.cuda())
        for g, e in zip(got, want, strict=True):
            assert g.device.type == "cuda" and g.dtype == e.dtype
            np.testing.assert_allclose(g.cpu().numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


def test_indexing_and_item_assignment_by_one_tensor_match_the_cpu():
    x, i = kiln.randn(4, 5), kiln.tensor([0, -1, 2])
    xc, ic = x.cuda(), i.cuda()
    for fn in (lambda x, i: x[i], lambda x, i: x[:, i], lambda x, i: x[1, i]):
        got = fn(xc, ic)
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), fn(x, i).numpy())
    y, yc = x.clone(), xc.clone()
    for target in (y, yc):
        idx = i if target is y else ic
        target[idx] = 2.0
        target[:, idx[:2]] = kiln.ones(4, 2, device=target.device)
        target.index_put_((idx,), kiln.ones(3, 5, device=target.device), accumulate=True)
    np.testing.assert_allclose(yc.cpu().numpy(), y.numpy())
    with pytest.raises(IndexError, match="index 7 is out of bounds for a dimension with size 4"):
        xc[kiln.tensor([7]).cuda()]


def test_a_checkpoint_loads_onto_the_device_map_location_names(tmp_path):
    path = tmp_path / "m.pt"
    base = kiln.arange(6.0).reshape(2, 3)
    kiln.save({"a": base, "col": base[:, 1]}, path)
    on_cuda = kiln.load(path, map_location="cuda")
    np.testing.assert_array_equal(host(on_cuda["a"]), base.numpy())
    np.testing.assert_array_equal(host(on_cuda["col"]), [1.0, 4.0])
    assert kiln.load(path, map_location={"cpu": "cuda:0"})["a"].device == "cuda:0"
    assert kiln.load(path, map_location={"cuda:0": "cuda:1"})["a"].device == "cpu"
    moved = kiln.load(path, map_location=lambda s, loc: s.cuda())
    assert moved["a"].device == "cuda:0"
