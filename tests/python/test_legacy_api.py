"""torch names that model files and scripts reach for at import or construction time: the
legacy constructors (Tensor(2, 3), FloatTensor, LongTensor, x.new), torch.nn.modules.utils'
_pair & co, torch.nn.common_types, torch.cuda.amp, torch.fx.wrap and
use_deterministic_algorithms; each against torch's behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln


def test_legacy_constructors_match_torch_shapes_and_dtypes():
    for args in [(2, 3), ([1.0, 2.0],), (), (kiln.Size([4]),)]:
        t = kiln.Tensor(*args)
        targs = tuple(torch.Size(a) if isinstance(a, kiln.Size) else a for a in args)
        assert tuple(t.shape) == tuple(torch.Tensor(*targs).shape)
        assert t.dtype == kiln.float32
    assert (kiln.Tensor(2, 3) == 0).all()  # kiln zero-fills what torch leaves uninitialized
    np.testing.assert_array_equal(kiln.Tensor([[1, 2], [3, 4]]).numpy(),
                                  torch.Tensor([[1, 2], [3, 4]]).numpy())
    for name in ("FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor",
                 "ByteTensor", "HalfTensor"):
        ours, theirs = getattr(kiln, name)([1, 0, 2]), getattr(torch, name)([1, 0, 2])
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        assert getattr(kiln, name)(2, 2).shape == (2, 2)
    x = kiln.arange(3)
    assert x.new(4).dtype == kiln.int64 and x.new(4).shape == (4,)
    assert x.new([7, 8]).tolist() == [7, 8] and x.new().shape == (0,)
    p = kiln.nn.Parameter(kiln.Tensor(4, 8))  # ESPnet / WeNet attention weights
    assert p.requires_grad and p.shape == (4, 8)
    with pytest.raises(TypeError, match="sizes"):
        kiln.Tensor([1.0], 2)


def test_module_utils_and_common_types():
    from kiln.nn.common_types import _size_2_t  # noqa: F401
    from kiln.nn.modules.utils import _pair, _quadruple, _single, _triple

    assert _single(3) == (3,) and _pair(3) == (3, 3) and _triple((1, 2, 3)) == (1, 2, 3)
    assert _quadruple(0) == (0, 0, 0, 0)


def test_cuda_amp_names_and_deterministic_switch():
    from kiln.cuda.amp import GradScaler, autocast

    with autocast():  # a CUDA region: CPU ops inside it are unaffected
        assert (kiln.ones(2) @ kiln.ones(2)).dtype == kiln.float32
    assert isinstance(GradScaler(enabled=False), kiln.amp.GradScaler)
    assert kiln.fx.wrap("helper") == "helper"
    kiln.use_deterministic_algorithms(True, warn_only=True)
    assert kiln.are_deterministic_algorithms_enabled()
    assert kiln.is_deterministic_algorithms_warn_only_enabled()
    kiln.use_deterministic_algorithms(False)
    assert not kiln.are_deterministic_algorithms_enabled()
