"""End to end: training loops written for torch, with the model under kiln.compile, for 30
steps: the losses follow kiln eager's and torch's step by step and the weights end at
torch's, with the forward and backward compiled and nothing on eager kernels (a strict
backend: a decline would raise). Tolerances as tests/python/autograd/test_training.py's
(float32; the libraries sum in different orders), a little wider for 30 steps."""

import math
import os
import sys

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
from kiln._capture.backend_compiled import CpuBackend  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "autograd"))
from test_training import assert_same_weights, copy_weights  # noqa: E402
from train_models import conv_net, gpt_classes, unet  # noqa: E402

STEPS = 30


def trained_without_fallbacks(backend):
    assert backend.reports, "nothing was compiled"
    for report in backend.reports:
        assert report.eager_nodes == 0 and report.fallbacks == [], report.fallbacks
    assert sum(r.backward_parts for r in backend.reports) >= 1


def classification_steps(torch_side, kiln_side, batches, rtol: float):
    """One cross-entropy training step per (x, y) batch in torch (model, optimizer) and kiln
    (compiled model, optimizer), the losses equal at every step; returns torch's first loss and
    the last step's (torch, kiln) losses."""
    first = None
    for step, (x, y) in enumerate(batches):
        losses = []
        for lib, (model, opt) in ((torch, torch_side), (kiln, kiln_side)):
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(lib.tensor(x)), lib.tensor(y))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.testing.assert_allclose(losses[1], losses[0], rtol=rtol, err_msg=f"loss at {step}")
        first = first if first is not None else losses[0]
    return first, losses


def train_gpts(seed: int, shapes: list, clip: bool):
    """nanoGPT from the same weights trained in torch, in kiln under kiln.compile (a strict
    backend) and in kiln eager, one batch of next-token targets of each shape in `shapes` per
    step; at every step the compiled loss must follow eager's and torch's. Returns the torch
    and compiled models, the backend, torch's first loss and the last step's losses."""
    torch.manual_seed(seed)
    tm, km, em = gpt_classes(torch)(), gpt_classes(kiln)(), gpt_classes(kiln)()
    copy_weights(tm, km)
    copy_weights(tm, em)
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(km, backend=backend)
    opts = [m.configure_optimizers(0.1, 3e-3, (0.9, 0.95)) for m in (tm, km, em)]
    rng = np.random.default_rng(seed)
    first = None
    for step, shape in enumerate(shapes):
        x = rng.integers(0, 48, shape)
        y = np.roll(x, -1, axis=1)
        losses = []
        for lib, model, opt in ((torch, tm, opts[0]), (kiln, compiled, opts[1]),
                                (kiln, em, opts[2])):
            _, loss = model(lib.tensor(x), lib.tensor(y))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
        t, c, e = losses
        np.testing.assert_allclose(c, e, rtol=5e-5, err_msg=f"compiled vs eager at step {step}")
        np.testing.assert_allclose(c, t, rtol=3e-4, err_msg=f"compiled vs torch at step {step}")
        first = first if first is not None else t
    return tm, km, backend, first, losses


def test_nanogpt_trains_compiled_as_eager_and_torch():
    tm, km, backend, first, losses = train_gpts(0, [(4, 8)] * STEPS, clip=True)
    assert first < math.log(48) + 0.5 and losses[0] < math.log(48) + 0.5  # sane, as eager
    noise = {f"transformer.h.{i}.attn.c_attn.bias": slice(32, 64) for i in range(2)}
    assert_same_weights(tm, km, atol=3e-4, noise=noise)
    trained_without_fallbacks(backend)
    assert len(backend.reports) == 1, "one compile for every step"


def test_conv_batchnorm_net_trains_compiled_as_eager_and_torch():
    torch.manual_seed(1)
    tm, km = conv_net(torch), conv_net(kiln)
    copy_weights(tm, km)
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(km, backend=backend)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    kopt = kiln.optim.SGD(km.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((8, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, 8))
               for _ in range(STEPS)]
    first, losses = classification_steps((tm, topt), (compiled, kopt), batches, rtol=5e-4)
    assert losses[0] < first  # the loss went down
    assert_same_weights(tm, km, atol=5e-4)  # running statistics and num_batches_tracked too
    trained_without_fallbacks(backend)
    out = kiln.explain(km)(kiln.tensor(batches[-1][0]))
    assert out.fallbacks == [[]] and out.backward_parts == [1]


def test_unet_trains_compiled_as_torch():
    """Reflect padding, transposed convolution, bilinear upsampling and skip cats: the decoder
    ops train compiled (forward and backward) with torch's losses and weights."""
    torch.manual_seed(2)
    tm, km = unet(torch), unet(kiln)
    copy_weights(tm, km)
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(km, backend=backend)
    topt = torch.optim.Adam(tm.parameters(), lr=3e-3)
    kopt = kiln.optim.Adam(km.parameters(), lr=3e-3)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)  # a learnable per-pixel target
    first, losses = classification_steps((tm, topt), (compiled, kopt), [(x, y)] * (STEPS // 2),
                                         rtol=1e-3)
    assert losses[0] < 0.8 * first
    # up2's bias is a per-channel constant that dec2's convolution keeps constant (reflect
    # padding too) and its BatchNorm subtracts: its exact gradient is 0, so what Adam steps on
    # is rounding noise.
    assert_same_weights(tm, km, atol=2e-3, noise={"up2.bias": slice(0, 16)})
    trained_without_fallbacks(backend)


def test_nanogpt_trains_compiled_with_changing_batch_and_sequence_sizes():
    """Sizes that change between steps become symbolic (automatic dynamic); the part then
    compiles its forward and backward per input shape (training.PerShapeTraining), so no step
    runs on eager kernels and the losses stay eager's."""
    shapes = [(4, 8), (3, 8), (4, 6), (2, 5), (4, 8), (3, 8), (2, 7), (4, 6)]
    tm, km, backend, _, _ = train_gpts(1, shapes, clip=False)
    noise = {f"transformer.h.{i}.attn.c_attn.bias": slice(32, 64) for i in range(2)}
    assert_same_weights(tm, km, atol=3e-4, noise=noise)
    trained_without_fallbacks(backend)
    assert len(backend.reports) <= 3  # static, then symbolic graphs (no capture per size)
    assert all(r.eager_calls == 0 for r in backend.reports)
    per_shape = [info for r in backend.reports for info in r.infos if info.get("per_shape")]
    assert per_shape, "the symbolic capture compiled no per-shape training part"
