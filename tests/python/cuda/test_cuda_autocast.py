"""Autocast on CUDA tensors (the host emulator here, the GPU where there is one): products in
float16 (CUDA's default), softmax in float32 (CUDA's list widens it, the CPU's does not), and
the same under kiln.compile, against the CPU computing the same casts."""

import numpy as np
import pytest

import kiln

pytestmark = pytest.mark.skipif(not kiln.cuda.is_available(),
                                reason="no CUDA device (the emulator: KILN_CUDA_EMULATOR=1)")


def inputs():
    g = np.random.default_rng(0)
    return [kiln.tensor(g.standard_normal(s).astype(np.float32)) for s in ((8, 16), (16, 4))]


def fn(a, b):
    y = a @ b
    return y, y.softmax(-1), kiln.nn.functional.linear(a, b.t())


def test_cuda_region_casts_as_torch_lists_say():
    a, b = inputs()
    with kiln.autocast("cuda"):
        assert kiln.get_autocast_dtype("cuda") == kiln.float16
        y, s, lin = fn(a.cuda(), b.cuda())
        cpu_y, cpu_s, _ = fn(a, b)  # a CUDA region leaves CPU tensors alone
    assert (y.dtype, s.dtype, lin.dtype) == (kiln.float16, kiln.float32, kiln.float16)
    assert cpu_y.dtype == kiln.float32 and cpu_s.dtype == kiln.float32
    ref = (a.half().float() @ b.half().float()).half().float()
    np.testing.assert_allclose(y.cpu().float().numpy(), ref.numpy(), rtol=1e-2, atol=1e-2)


def test_compiled_cuda_code_in_a_region():
    a, b = inputs()
    a, b = a.cuda(), b.cuda()
    compiled = kiln.compile(fn)
    with kiln.autocast("cuda"):
        want, got = fn(a, b), compiled(a, b)
        assert kiln.explain(fn)(a, b).graph_break_count == 0
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype and g.device == w.device
        np.testing.assert_allclose(g.cpu().float().numpy(), w.cpu().float().numpy(), rtol=1e-2,
                                   atol=1e-2)

