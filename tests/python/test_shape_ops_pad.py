"""F.pad (all modes), F.one_hot and F.embedding vs torch."""

import pytest
import torch
import torch.nn.functional as TF
from conftest import DTYPES, FLOAT_DTYPES, assert_close, make, to_kiln

import kiln
import kiln.nn.functional as KF


@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_constant(dtype):
    t, k = make((2, 3, 4), dtype)
    for pad in ((1, 2), (0, 0, 2, 1), (1, 1, 1, 1, 1, 1), (-1, 2), (-2, -1, 1, 0), (0, -4)):
        assert_close(KF.pad(k, pad), TF.pad(t, pad))
    value = True if dtype == "bool" else 3
    assert_close(KF.pad(k, (1, 1), value=value), TF.pad(t, (1, 1), value=value))
    assert_close(kiln.pad(k, [2, 0], "constant", 1.5), TF.pad(t, [2, 0], "constant", 1.5))


@pytest.mark.parametrize("pad", [(1, 2), (-1, 2), (-2, -1, 1, 0), (0, -4, 2, -1)])
def test_pad_constant_gradient(pad):
    """Negative widths crop: their gradient is the inverse pad (zeros where cropped)."""
    t, k = make((2, 3, 5), "float64")
    t.requires_grad_(), k.requires_grad_()
    w, kw = make(TF.pad(t, pad).shape, "float64")
    (TF.pad(t, pad) * w).sum().backward()
    (KF.pad(k, pad) * kw).sum().backward()
    assert_close(k.grad, t.grad)


def test_pad_constant_layouts():
    t, k = make((3, 4), "float32")
    assert_close(KF.pad(k.t(), (1, 2, 0, 1)), TF.pad(t.t(), (1, 2, 0, 1)))
    assert_close(KF.pad(k[0, 0], ()), TF.pad(t[0, 0], ()))
    t0, k0 = make((0, 2), "float32")
    assert_close(KF.pad(k0, (1, 1, 1, 1), value=2.0), TF.pad(t0, (1, 1, 1, 1), value=2.0))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64"])
def test_pad_modes(mode, dtype):
    cases = [((2, 5), (2, 1)), ((2, 3, 5), (1, 3)), ((2, 3, 4), (2, 1, 1, 2)),
             ((1, 2, 3, 4), (1, 1, 2, 0)), ((1, 2, 3, 3, 4), (1, 2, 1, 1, 2, 0)),
             ((2, 3, 5), (-1, 2))]
    for shape, pad in cases:
        t, k = make(shape, dtype)
        assert_close(KF.pad(k, pad, mode=mode), TF.pad(t, pad, mode=mode))
    t, k = make((2, 5, 3), dtype)
    t, k = t.transpose(1, 2), k.transpose(1, 2)
    assert_close(KF.pad(k, (1, 1), mode), TF.pad(t, (1, 1), mode))


def test_pad_errors():
    _, k = make((2, 3), "float32")
    with pytest.raises(RuntimeError, match="divisible by 2"):
        KF.pad(k, (1, 1, 1))
    with pytest.raises(RuntimeError, match="padding length 6 and input of dimension 2"):
        KF.pad(k, (1,) * 6)
    with pytest.raises(RuntimeError, match="negative output size"):
        KF.pad(k, (-2, -2))
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode foo"):
        KF.pad(k, (1, 1), mode="foo")
    with pytest.raises(RuntimeError, match="doesn't take in value"):
        KF.pad(k, (1, 1), mode="reflect", value=1.0)
    with pytest.raises(NotImplementedError, match="Padding size 4 is not supported for 2D"):
        KF.pad(k, (1, 1, 1, 1), mode="replicate")
    with pytest.raises(RuntimeError, match=r"Padding size should be less than.*\(3, 3\)"):
        KF.pad(k, (3, 3), mode="reflect")
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        KF.pad(k, (4, 0), mode="circular")


def test_one_hot():
    for shape, high, classes in (((5,), 3, -1), ((2, 3), 4, 6), ((), 2, 3), ((0,), 1, 4)):
        t = torch.randint(0, high, shape, generator=torch.Generator().manual_seed(0))
        assert_close(KF.one_hot(to_kiln(t), classes), TF.one_hot(t, classes))
    t = torch.tensor([[2, 0], [1, 3]]).t()
    assert_close(KF.one_hot(to_kiln(torch.tensor([[2, 0], [1, 3]])).t()), TF.one_hot(t))


def test_one_hot_errors():
    with pytest.raises(RuntimeError, match="LongTensor"):
        KF.one_hot(to_kiln(torch.tensor([1, 2], dtype=torch.int32)))
    with pytest.raises(RuntimeError, match="non-negative"):
        KF.one_hot(to_kiln(torch.tensor([1, -2])))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        KF.one_hot(to_kiln(torch.tensor([1, 2])), 2)
    with pytest.raises(RuntimeError, match="empty tensor"):
        KF.one_hot(to_kiln(torch.tensor([], dtype=torch.int64)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["int32"])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_embedding(dtype, index_dtype):
    wt, wk = make((6, 3), dtype)
    for idx in (torch.tensor([0, 5, 2, 2]), torch.tensor([[1, 0], [4, 3]]), torch.tensor(3),
                torch.tensor([], dtype=torch.int64)):
        idx = idx.to(index_dtype)
        assert_close(KF.embedding(to_kiln(idx), wk), TF.embedding(idx, wt))
    idx = torch.tensor([[1, 0, 2], [4, 3, 5]]).to(index_dtype)
    assert_close(KF.embedding(to_kiln(idx).t(), wk.t().contiguous().t(), padding_idx=0),
                 TF.embedding(idx.t(), wt, padding_idx=0))


def test_embedding_errors():
    _, w = make((3, 2), "float32")
    with pytest.raises(IndexError, match=r"embedding: index 5 is out of bounds .* size 3"):
        KF.embedding(to_kiln(torch.tensor([1, 5])), w)
    with pytest.raises(IndexError, match="index -1"):
        KF.embedding(to_kiln(torch.tensor([-1])), w)
    with pytest.raises(RuntimeError, match="Long, Int"):
        KF.embedding(to_kiln(torch.tensor([1.0])), w)
    with pytest.raises(RuntimeError, match="must be 2-D"):
        KF.embedding(to_kiln(torch.tensor([1])), w[0])
    with pytest.raises(ValueError, match="Padding_idx must be within num_embeddings"):
        KF.embedding(to_kiln(torch.tensor([1])), w, padding_idx=5)
