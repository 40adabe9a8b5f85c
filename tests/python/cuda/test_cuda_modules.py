"""Modules on CUDA: Module.cuda()/.to()/.cpu(), eager forward and kiln.compile on the device,
each equal to the CPU's result."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.ln, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)

    def forward(self, x):
        return F.softmax(self.fc2(F.gelu(self.ln(self.fc1(x)))), -1)


# These run where kiln has a CUDA device: a GPU, or the host emulator (KILN_CUDA_EMULATOR=1,
# which scripts/test.sh sets for a second pytest run of this folder).
pytestmark = pytest.mark.skipif(not kiln.cuda.is_available(),
                                reason="no CUDA device (run with KILN_CUDA_EMULATOR=1)")


@pytest.fixture(autouse=True)
def _inference():
    """Inference, as a user runs it: the parameters require grad, grad mode is off."""
    with kiln.no_grad():
        yield


def test_forward_with_grad_mode_on_runs_on_the_device():
    # Training on CUDA is not supported yet: the forward runs; a backward names what is missing.
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(4, 2), nn.Dropout(0.1)).cuda()
    x = kiln.randn(2, 3, 4, 4).cuda()
    with kiln.enable_grad():
        y = m(x).square().sum()
        assert y.requires_grad
        with pytest.raises((NotImplementedError, RuntimeError), match="CUDA"):
            y.backward()

def test_module_moves_and_runs_eagerly():
    kiln.manual_seed(0)
    m = Block()
    x = kiln.randn(5, 8)
    want = m(x).numpy()
    assert m.cuda() is m
    assert all(p.device == "cuda:0" for p in m.parameters())
    assert isinstance(m.fc1.weight, nn.Parameter)
    got = m(x.cuda())
    assert got.device == "cuda:0"
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-6)
    m.to("cpu")
    assert all(p.device == "cpu" for p in m.parameters())
    np.testing.assert_allclose(m(x).numpy(), want, rtol=1e-6)


def test_compiled_module_on_cuda_equals_cpu_eager():
    kiln.manual_seed(1)
    m = Block()
    xs = [kiln.randn(5, 8), kiln.randn(3, 8)]
    want = [m(x).numpy() for x in xs]
    m.cuda()
    f = kiln.compile(m)
    for x, w in zip(xs, want, strict=True):
        got = f(x.cuda())
        assert got.device == "cuda:0"
        np.testing.assert_allclose(got.cpu().numpy(), w, rtol=1e-5, atol=1e-6)


def test_compiled_function_with_a_graph_break_on_cuda():
    def fn(x, y):
        z = (x * y).relu()
        print("break", end="")  # the graph breaks here; both sides still run on the device
        return z.sum(-1) + 1

    x, y = kiln.randn(4, 6), kiln.randn(6)
    got = kiln.compile(fn)(x.cuda(), y.cuda())
    np.testing.assert_allclose(got.cpu().numpy(), ((x * y).relu().sum(-1) + 1).numpy(),
                               rtol=1e-5)


@pytest.mark.parametrize("use_mha", [False, True], ids=["sdpa", "mha"])
def test_compiled_gpt_on_cuda_equals_cpu_eager(use_mha):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from models import gpt

    kiln.manual_seed(0)
    m = gpt.build(kiln, nn, F)(use_mha=use_mha)
    m.eval()
    idx = kiln.randint(0, 50, (2, 12))
    want, _ = m(idx)
    m.cuda()
    eager, _ = m(idx.cuda())
    np.testing.assert_allclose(eager.cpu().numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    got, _ = kiln.compile(m)(idx.cuda())
    assert got.device == "cuda:0"
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


def test_compiled_convnet_on_cuda_equals_cpu_eager():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from models import convnet

    kiln.manual_seed(0)
    m = convnet.build(kiln, nn, F)()
    m.eval()
    x = kiln.randn(2, 3, 16, 16)
    want = m(x)
    m.cuda()
    got = kiln.compile(m)(x.cuda())
    assert got.device == "cuda:0"
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


def test_compiled_gathers_on_cuda_equal_cpu_eager():
    def fn(ids, emb, x, i):
        return F.embedding(ids, emb).sum(-1), x.gather(1, i) * 2, x.index_select(0, i[:, 0])

    ids, emb = kiln.randint(0, 12, (3, 4)), kiln.randn(12, 8)
    x, i = kiln.randn(5, 7), kiln.randint(0, 5, (5, 2))
    want = fn(ids, emb, x, i)
    backend = CpuBackend(fallback=False)  # strict: a decline fails the test
    got = kiln.compile(fn, backend=backend)(ids.cuda(), emb.cuda(), x.cuda(), i.cuda())
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "cuda"
        np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


def test_compiled_embedding_on_cuda_out_of_range():
    f = kiln.compile(lambda ids, emb: F.embedding(ids, emb) + 1, backend=CpuBackend(fallback=False))
    emb = kiln.randn(6, 4).cuda()
    f(kiln.tensor([0, 5]).cuda(), emb)
    # On the device, eager and compiled code check positions in the kernel alike.
    msg = "index 6 is out of bounds for a dimension with size 6"
    with pytest.raises(IndexError, match=msg):
        f(kiln.tensor([0, 6]).cuda(), emb)
    with pytest.raises(IndexError, match=msg.replace("6", "2")):
        kiln.tensor([[1.0], [2.0]]).cuda().gather(0, kiln.tensor([[6]]).cuda() - 4)


def test_compiled_sort_cumsum_and_class_loss_on_cuda_equal_cpu_eager():
    """Extern nodes (sort, cumsum) run inside the device program; cross_entropy's indirect
    load of the target class too."""
    def fn(logits, t):
        probs, idx = logits.softmax(-1).sort(-1, descending=True)
        return probs.cumsum(-1), idx, F.cross_entropy(logits, t, label_smoothing=0.1)

    x, t = kiln.randn(4, 10), kiln.randint(0, 10, (4,))
    want = fn(x, t)
    backend = CpuBackend(fallback=False)  # strict: a decline fails the test
    got = kiln.compile(fn, backend=backend)(x.cuda(), t.cuda())
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "cuda"
        np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


def test_compiled_indexing_on_cuda_equals_cpu_eager():
    def fn(x, i, t):
        y = x[:, i] * 2
        y[0] = 0.0
        y[:, t[:2]] = 1.0
        return y, x[t] + 1

    x, i, t = kiln.randn(4, 6), kiln.tensor([5, 0, -1]), kiln.tensor([0, 2, 2, 3])
    want = fn(x, i, t)
    backend = CpuBackend(fallback=False)  # strict: a decline fails the test
    got = kiln.compile(fn, backend=backend)(x.cuda(), i.cuda(), t.cuda())
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "cuda"
        np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=1e-6)


def test_compiled_dropout_on_cuda_draws_eagers_mask():
    """The philox prim in CUDA C: the device kernel draws the CPU eager mask for the same
    generator state (offsets past 2^32 included) and leaves the generator where eager does."""
    def fn(x):
        return F.dropout(x.relu() * 2, 0.4) + 1

    x = kiln.randn(7, 33)
    seed, offset = (2**63 + 9).to_bytes(8, "little"), (2**32 - 50).to_bytes(8, "little")
    state = kiln.tensor(list(seed + offset), dtype=kiln.uint8)
    kiln.set_rng_state(state)
    want = fn(x)
    want_state = kiln.get_rng_state()
    backend = CpuBackend(fallback=False)  # strict: a decline fails the test
    compiled = kiln.compile(fn, backend=backend)
    kiln.set_rng_state(state)
    got = compiled(x.cuda())
    assert all(r.eager_nodes == 0 and r.eager_calls == 0 for r in backend.reports)
    assert got.device.type == "cuda"
    assert kiln.equal(kiln.get_rng_state(), want_state)
    np.testing.assert_array_equal(got.cpu().numpy() == 1, want.numpy() == 1)
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-6)


def test_compiled_row_kernels_on_cuda_are_one_kernel_each():
    """The schedule's kernel over rows (softmax's max, sum and output; layer_norm's statistics
    and output) is one CUDA kernel, as on the CPU: the code follows the schedule."""

    def fn(x, w, b):
        return F.softmax(x * 2, -1), F.layer_norm(x, (x.shape[-1],), w, b)

    x, w, b = kiln.randn(6, 40), kiln.randn(40), kiln.randn(40)
    want = fn(x, w, b)
    backend = CpuBackend(fallback=False)
    got = kiln.compile(fn, backend=backend)(x.cuda(), w.cuda(), b.cuda())
    (report,) = backend.reports
    (info,) = report.infos
    assert report.eager_nodes == 0 and report.eager_calls == 0
    # six loop nodes over the same rows: one schedule kernel, one CUDA kernel
    assert info["loop_nodes"] == 6 and info["kernels"] == 1, info
    assert info["generated_kernels"] == 1, info
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g.cpu().numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
