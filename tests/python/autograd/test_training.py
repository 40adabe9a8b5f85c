"""Training loops written for torch, run with only the imports swapped: kiln must follow torch's
loss curve step by step and end at torch's weights, from the same initial weights and data.

Tolerances (float32 throughout): losses rtol 2e-4 per step, final weights atol 2e-4 — the
libraries sum in different orders, and 20 optimizer steps amplify the last-bit differences.
"""

import math
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
from train_models import conv_net, gpt_classes  # noqa: E402


def copy_weights(torch_model, kiln_model):
    state = {k: kiln.tensor(v.detach().numpy().copy()) for k, v in torch_model.state_dict().items()}
    kiln_model.load_state_dict(state)


def assert_same_weights(torch_model, kiln_model, atol, noise=None):
    """``noise`` maps a name to a slice whose gradient is pure rounding noise (attention's key
    bias: softmax is invariant to it, so its exact gradient is 0 and Adam amplifies whatever
    rounding leaves); those entries are held to the optimizer's step size instead."""
    ks = kiln_model.state_dict()
    for name, tv in torch_model.state_dict().items():
        k, t = ks[name].detach().numpy(), tv.detach().numpy()
        if noise and name in noise:
            sl = noise[name]
            np.testing.assert_allclose(k[sl], t[sl], atol=5e-2, err_msg=name)
            k, t = np.delete(k, np.r_[sl]), np.delete(t, np.r_[sl])
        np.testing.assert_allclose(k, t, atol=atol, rtol=1e-3, err_msg=name)


def test_nanogpt_training_loop_follows_torch():
    torch.manual_seed(0)
    tm = gpt_classes(torch)()
    km = gpt_classes(kiln)()
    copy_weights(tm, km)
    topt = tm.configure_optimizers(0.1, 3e-3, (0.9, 0.95))
    kopt = km.configure_optimizers(0.1, 3e-3, (0.9, 0.95))
    rng = np.random.default_rng(0)
    for step in range(20):
        x = rng.integers(0, 48, (4, 8))
        y = np.roll(x, -1, axis=1)
        losses = []
        for lib, model, opt in ((torch, tm, topt), (kiln, km, kopt)):
            _, loss = model(lib.tensor(x), lib.tensor(y))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append((loss.item(), float(norm)))
        (tl, tn), (kl, kn) = losses
        np.testing.assert_allclose(kl, tl, rtol=2e-4, err_msg=f"loss at step {step}")
        np.testing.assert_allclose(kn, tn, rtol=2e-3, err_msg=f"grad norm at step {step}")
    assert losses[0][0] < math.log(48) + 0.5  # it trained from a sane start
    key_bias = slice(32, 64)
    noise = {f"transformer.h.{i}.attn.c_attn.bias": key_bias for i in range(2)}
    assert_same_weights(tm, km, atol=2e-4, noise=noise)


def test_conv_batchnorm_sgd_training_loop_follows_torch():
    torch.manual_seed(1)
    tm, km = conv_net(torch), conv_net(kiln)
    copy_weights(tm, km)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    kopt = kiln.optim.SGD(km.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    first = None
    for step in range(20):
        losses = []
        for lib, model, opt in ((torch, tm, topt), (kiln, km, kopt)):
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(lib.tensor(x)), lib.tensor(y))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.testing.assert_allclose(losses[1], losses[0], rtol=2e-4, err_msg=f"loss at step {step}")
        first = first if first is not None else losses[0]
    assert losses[0] < first  # the loss went down
    assert_same_weights(tm, km, atol=2e-4)  # running statistics and num_batches_tracked too
