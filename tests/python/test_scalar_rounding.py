"""Reduced-precision tensors with Python numbers: the number is rounded as torch rounds it."""

import numpy as np
import pytest
import torch

import kiln


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("scalar", [0.1, 3.3, -1.7, 2])
@pytest.mark.parametrize(
    "op",
    [
        lambda a, s: a + s,
        lambda a, s: a - s,
        lambda a, s: s - a,
        lambda a, s: a * s,
        lambda a, s: a / s,
        lambda a, s: a < s,
        lambda a, s: a >= s,
        lambda a, s: a == s,
    ],
    ids=["add", "sub", "rsub", "mul", "div", "lt", "ge", "eq"],
)
def test_reduced_float_with_a_python_number_rounds_like_torch(dtype, scalar, op):
    # torch converts the number to the tensor's dtype first (f16 + 0.1 adds f16(0.1)), except
    # that mul and true division read its original value in float32.
    x = np.random.default_rng(0).standard_normal(3000).astype(np.float32)
    t = torch.from_numpy(x).to(getattr(torch, dtype))
    k = kiln.from_numpy(x).to(getattr(kiln, dtype))
    np.testing.assert_array_equal(op(k, scalar).float().numpy(), op(t, scalar).float().numpy())
