"""cat / stack of tensors of different dtypes promote their result (bf16 with f32 gives f32);
each input's gradient comes back in that input's own dtype, as torch's, eagerly and compiled.
A ViT under bf16 autocast hits this: `cat([cls_token.expand(B, -1, -1), patch_embed(x)], 1)`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln
from kiln._capture.backend_compiled import CpuBackend


def _join(lib, name):
    if name == "cat":
        return lambda a, b: lib.cat([a, b], 1)
    return lambda a, b: lib.stack([a, b], 0)


@pytest.mark.parametrize("name", ["cat", "stack"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gradients_come_back_in_each_inputs_dtype(name, compiled):
    g = np.random.default_rng(0)
    w_np, x_np, y_np = (g.standard_normal((4, 4)).astype(np.float32) for _ in range(3))
    grads = {}
    for lib in (torch, kiln):
        w = lib.tensor(w_np, requires_grad=True)
        y = lib.tensor(y_np, requires_grad=True)

        def loss(x, w=w, y=y, lib=lib):
            a = x.to(lib.bfloat16) @ w.to(lib.bfloat16)  # bf16 with history into the join
            return (_join(lib, name)(a, y) * 3).sum()

        backend = CpuBackend(fallback=False)
        fn = kiln.compile(loss, backend=backend) if compiled and lib is kiln else loss
        fn(lib.tensor(x_np)).backward()
        if compiled and lib is kiln:  # the backward compiled too: no part trained eagerly
            assert [f for r in backend.reports for f in r.fallbacks] == []
            assert [r.eager_nodes for r in backend.reports] == [0]
        assert w.grad.dtype == w.dtype and y.grad.dtype == y.dtype
        grads[lib.__name__] = (w.grad.float().numpy(), y.grad.numpy())
    for got, want in zip(grads["kiln"], grads["torch"], strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_a_vit_token_cat_under_autocast_trains():
    kiln.manual_seed(0)
    conv = kiln.nn.Conv2d(3, 8, 4, 4)
    cls = kiln.nn.Parameter(kiln.zeros(1, 1, 8))
    x = kiln.randn(2, 3, 16, 16)
    with kiln.autocast("cpu", dtype=kiln.bfloat16):
        tokens = conv(x).flatten(2).transpose(1, 2)
        out = kiln.cat([cls.expand(2, -1, -1), tokens], dim=1)
    assert (out.dtype, tokens.dtype) == (kiln.float32, kiln.bfloat16)
    out.float().sum().backward()
    assert conv.weight.grad.dtype == kiln.float32 and cls.grad.dtype == kiln.float32
    assert cls.grad.abs().sum().item() == pytest.approx(2 * 8)  # d(sum)/d(cls) over a batch of 2
