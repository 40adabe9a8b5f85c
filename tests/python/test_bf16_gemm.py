"""bfloat16 matrix products (oneDNN's GEMM where the CPU has bfloat16 dot products,
runtime/onednn.h; float32 BLAS on widened operands elsewhere) against torch's bfloat16 results
and a float64 reference: every layout (transposed, sliced, broadcast batch, stride-0 expanded),
addmm's bias forms, linear with and without bias, and the same results with oneDNN turned off
(KILN_ONEDNN=0, in a child process)."""

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402


def pair(*shape, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return torch.tensor(a).bfloat16(), kiln.tensor(a).to(kiln.bfloat16)


def same(k, t):
    assert k.dtype == kiln.bfloat16 and tuple(k.shape) == tuple(t.shape)
    ref = t.double().numpy()
    got = k.double().numpy()
    # both round a float32 sum of exact products once: at most an ulp of bfloat16 apart
    np.testing.assert_allclose(got, ref, rtol=2 ** -7, atol=1e-2)


CASES = {
    "square": lambda m, x, y: m.matmul(x, y),
    "a_transposed": lambda m, x, y: m.matmul(x.t(), y),
    "b_transposed": lambda m, x, y: m.matmul(x, y.t()),
    "both_transposed": lambda m, x, y: m.matmul(x.t(), y.t()),
    "row_slice": lambda m, x, y: m.matmul(x[3:40:2], y),
    "column_slice": lambda m, x, y: m.matmul(x[:, :33], y[:33]),
    "vector": lambda m, x, y: m.matmul(x, y[:, 0]),
    "batched": lambda m, x, y: m.matmul(x.reshape(4, 16, 64), y.reshape(4, 16, 64)
                                        .transpose(1, 2)),
    "broadcast_batch": lambda m, x, y: m.matmul(x.reshape(4, 16, 64), y),
    "expanded": lambda m, x, y: m.matmul(x[:1].expand(8, 64), y),
    "addmm_row_bias": lambda m, x, y: m.addmm(y[0], x, y),
    "addmm_full_bias": lambda m, x, y: m.addmm(x[:, :64], x, y),
    "addmm_scaled": lambda m, x, y: m.addmm(y[0], x, y, beta=0.5, alpha=2.0),
    "linear_bias": lambda m, x, y: m.nn.functional.linear(x, y.t(), y[1]),
    "linear": lambda m, x, y: m.nn.functional.linear(x.reshape(2, 32, 64), y),
    "baddbmm": lambda m, x, y: m.baddbmm(y[:16, :16].reshape(1, 16, 16), x.reshape(4, 16, 64),
                                         y[:, :16].reshape(1, 64, 16).expand(4, 64, 16)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bf16_products_match_torch(name):
    (tx, kx), (ty, ky) = pair(64, 64), pair(64, 64, seed=1)
    available, before = kiln._C._onednn_stats()
    same(CASES[name](kiln, kx, ky), CASES[name](torch, tx, ty))
    if available and name != "addmm_scaled":  # scaled forms widen to float32 BLAS
        assert kiln._C._onednn_stats()[1] > before, "the product did not run on oneDNN"


def test_bf16_product_gradients_match_torch():
    (tx, kx), (ty, ky) = pair(32, 48), pair(48, 16, seed=1)
    tx.requires_grad_(), ty.requires_grad_(), kx.requires_grad_(), ky.requires_grad_()
    (tx @ ty).float().square().sum().backward()
    (kx @ ky).float().square().sum().backward()
    same(kx.grad, tx.grad)
    same(ky.grad, ty.grad)


def test_onednn_off_gives_the_same_products():
    code = ("import kiln, numpy as np\n"
            "a = kiln.tensor(np.random.default_rng(0).standard_normal((64, 96))"
            ".astype(np.float32)).to(kiln.bfloat16)\n"
            "b = a.t() @ a[:, :40]\n"
            "import sys; sys.stdout.buffer.write(b.float().numpy().tobytes())\n")
    outs = []
    for flag in ("1", "0"):
        env = dict(os.environ, KILN_ONEDNN=flag)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             check=True).stdout
        outs.append(np.frombuffer(out, dtype=np.float32))
    np.testing.assert_allclose(outs[0], outs[1], rtol=2 ** -7, atol=1e-2)
