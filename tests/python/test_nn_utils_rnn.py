"""kiln.nn.utils.rnn against torch.nn.utils.rnn: every packing utility (values, dtypes, index
tensors, gradients, errors), and RNN/LSTM/GRU on PackedSequence input with torch's weights."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn.utils import rnn as T  # noqa: E402

import kiln  # noqa: E402
import kiln.nn.utils.rnn as K  # noqa: E402

RNG = np.random.default_rng(11)


def _np(t):
    return t.detach().numpy()


def _same(k, t):
    """Same values and the same dtype (by name), or both None."""
    if t is None:
        assert k is None
        return
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(_np(k), _np(t), rtol=1e-12, atol=1e-12)


def _same_packed(k, t):
    assert isinstance(k, K.PackedSequence)
    for a, b in zip(k, t, strict=True):
        _same(a, b)


# ---- pack_padded_sequence / pad_packed_sequence --------------------------------------------------


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize(
    "lengths,enforce_sorted",
    [([5, 3, 3, 1], True), ([2, 5, 1, 5], False), ([4, 4, 4, 4], False), ([1, 1, 1, 1], True)],
)
@pytest.mark.parametrize("trailing", [(), (3,), (2, 2)])
def test_pack_then_pad_round_trip(batch_first, lengths, enforce_sorted, trailing):
    x = RNG.standard_normal((4, 6, *trailing) if batch_first else (6, 4, *trailing))
    kx = kiln.tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    kp = K.pack_padded_sequence(kx, lengths, batch_first, enforce_sorted)
    tp = T.pack_padded_sequence(tx, lengths, batch_first, enforce_sorted)
    _same_packed(kp, tp)
    for total in (None, 8):
        ko, kl = K.pad_packed_sequence(kp, batch_first, padding_value=-2.5, total_length=total)
        to, tl = T.pad_packed_sequence(tp, batch_first, padding_value=-2.5, total_length=total)
        _same(ko, to)
        _same(kl, tl)
    # Gradients flow back through both conversions to the padded input (zero past each end).
    w = RNG.standard_normal(tuple(to.shape))
    (ko * kiln.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_lengths_as_list_or_tensor_and_dtypes_kept():
    x = RNG.standard_normal((3, 3, 2)).astype(np.float32)
    for lengths in ([3, 2, 1], (3, 2, 1)):
        _same_packed(
            K.pack_padded_sequence(kiln.tensor(x), lengths),
            T.pack_padded_sequence(torch.tensor(x), lengths),
        )
    for dt in ("int32", "int64"):
        kp = K.pack_padded_sequence(kiln.tensor(x), kiln.tensor([3, 2, 1], dtype=getattr(kiln, dt)))
        tp = T.pack_padded_sequence(
            torch.tensor(x), torch.tensor([3, 2, 1], dtype=getattr(torch, dt))
        )
        _same_packed(kp, tp)
    xi = (x * 10).astype(np.int64)
    kp = K.pack_padded_sequence(kiln.tensor(xi), [2, 2, 1], enforce_sorted=False)
    tp = T.pack_padded_sequence(torch.tensor(xi), [2, 2, 1], enforce_sorted=False)
    _same_packed(kp, tp)
    _same(
        K.pad_packed_sequence(kp, padding_value=7)[0], T.pad_packed_sequence(tp, padding_value=7)[0]
    )


def test_ties_keep_their_order_when_sorting():
    x = RNG.standard_normal((3, 6))
    for lengths in ([2, 2, 2, 2, 3, 2], [1, 2, 1, 2, 2, 1]):
        _same_packed(
            K.pack_padded_sequence(kiln.tensor(x), lengths, enforce_sorted=False),
            T.pack_padded_sequence(torch.tensor(x), lengths, enforce_sorted=False),
        )


def _raises_like(kfn, tfn, match):
    with pytest.raises(Exception, match=match) as tinfo:
        tfn()
    with pytest.raises(tinfo.type, match=match):
        kfn()


def test_pack_padded_errors_in_torch_words():
    x = RNG.standard_normal((4, 3, 2))
    kx, tx = kiln.tensor(x), torch.tensor(x)
    cases = [
        ([2, 3, 1], {}, "must be sorted in decreasing order when `enforce_sorted` is True"),
        ([3, 2], {}, "Expected `len\\(lengths\\)` to be equal to batch_size, but got 2"),
        ([3, 2, 0], {}, "Length of all samples has to be greater than 0"),
    ]
    for lengths, kw, match in cases:
        _raises_like(
            lambda lengths=lengths, kw=kw: K.pack_padded_sequence(kx, lengths, **kw),
            lambda lengths=lengths, kw=kw: T.pack_padded_sequence(tx, lengths, **kw),
            match,
        )
    _raises_like(
        lambda: K.pack_padded_sequence(kiln.zeros(0, 3, 2), [3, 2, 1]),
        lambda: T.pack_padded_sequence(torch.zeros(0, 3, 2), [3, 2, 1]),
        "Cannot pack empty tensors",
    )
    _raises_like(
        lambda: K.pack_padded_sequence(kx, kiln.tensor([[3, 2, 1]])),
        lambda: T.pack_padded_sequence(tx, torch.tensor([[3, 2, 1]])),
        "'lengths' argument should be a 1D CPU int64 tensor, but got 2D cpu Long tensor",
    )
    # torch reads past the padded input here; kiln refuses.
    with pytest.raises(RuntimeError, match="at most the padded length 4"):
        K.pack_padded_sequence(kx, [5, 2, 1])


def test_pad_packed_errors():
    kp = K.pack_padded_sequence(kiln.randn(4, 2, 1), [4, 2])
    tp = T.pack_padded_sequence(torch.randn(4, 2, 1), [4, 2])
    _raises_like(
        lambda: K.pad_packed_sequence(kp, total_length=3),
        lambda: T.pad_packed_sequence(tp, total_length=3),
        "Expected total_length to be at least the length of the longest sequence in input, "
        "but got total_length=3 and max sequence length being 4",
    )
    _raises_like(
        lambda: K.pad_packed_sequence(K.PackedSequence(kp.data, kp.batch_sizes.float())),
        lambda: T.pad_packed_sequence(T.PackedSequence(tp.data, tp.batch_sizes.float())),
        "1D CPU int64 tensor, but got 1D cpu Float tensor",
    )


# ---- pad_sequence / unpad_sequence / pack_sequence / unpack_sequence -----------------------------


def _seqs(lengths, trailing=(), dtype=np.float64):
    return [RNG.standard_normal((n, *trailing)).astype(dtype) for n in lengths]


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("trailing", [(), (3,)])
def test_pad_sequence(batch_first, padding_side, trailing):
    seqs = _seqs([2, 5, 0, 3], trailing)
    ks = [kiln.tensor(s, requires_grad=True) for s in seqs]
    ts = [torch.tensor(s, requires_grad=True) for s in seqs]
    kw = {"batch_first": batch_first, "padding_value": 1.5, "padding_side": padding_side}
    ko, to = K.pad_sequence(ks, **kw), T.pad_sequence(ts, **kw)
    _same(ko, to)
    w = RNG.standard_normal(tuple(to.shape))
    (ko * kiln.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    for k, t in zip(ks, ts, strict=True):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_pad_sequence_casts_and_broadcasts_to_the_first_and_takes_a_tensor():
    a, b = np.ones((2, 3), dtype=np.int64), RNG.standard_normal(3)
    _same(
        K.pad_sequence([kiln.tensor(a), kiln.tensor(b)], padding_value=1.5),
        T.pad_sequence([torch.tensor(a), torch.tensor(b)], padding_value=1.5),
    )
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    _same(K.pad_sequence(kiln.tensor(x), True), T.pad_sequence(torch.tensor(x), True))
    _same(K.pad_sequence(iter([kiln.tensor(x)])), T.pad_sequence(iter([torch.tensor(x)])))


def test_pad_sequence_errors():
    _raises_like(lambda: K.pad_sequence([]), lambda: T.pad_sequence([]), "empty list of sequences")
    _raises_like(
        lambda: K.pad_sequence([kiln.ones(2)], padding_side="mid"),
        lambda: T.pad_sequence([torch.ones(2)], padding_side="mid"),
        "Expected padding_side to be one of left or right, but got mid.",
    )
    _raises_like(
        lambda: K.pad_sequence(5),
        lambda: T.pad_sequence(5),
        "pad_sequence: Expected iterable for input sequences, but got arg of type: <class 'int'>",
    )


@pytest.mark.parametrize("batch_first", [False, True])
def test_unpad_sequence(batch_first):
    seqs = _seqs([3, 1, 4], (2,))
    kpad = K.pad_sequence([kiln.tensor(s) for s in seqs], batch_first)
    tpad = T.pad_sequence([torch.tensor(s) for s in seqs], batch_first)
    lengths = [3, 1, 4]
    kout = K.unpad_sequence(kpad, kiln.tensor(lengths), batch_first)
    tout = T.unpad_sequence(tpad, torch.tensor(lengths), batch_first)
    assert len(kout) == len(tout) == 3
    for k, t, s in zip(kout, tout, seqs, strict=True):
        _same(k, t)
        np.testing.assert_array_equal(k.numpy(), s)


@pytest.mark.parametrize("lengths,enforce_sorted", [([4, 2, 2, 1], True), ([1, 3, 2, 3], False)])
def test_pack_sequence_and_unpack_sequence(lengths, enforce_sorted):
    seqs = _seqs(lengths, (2,))
    kp = K.pack_sequence([kiln.tensor(s) for s in seqs], enforce_sorted)
    tp = T.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted)
    _same_packed(kp, tp)
    for k, t in zip(K.unpack_sequence(kp), T.unpack_sequence(tp), strict=True):
        _same(k, t)
    ints = [kiln.tensor([1, 2, 3]), kiln.tensor([4, 5]), kiln.tensor([6])]
    _same_packed(
        K.pack_sequence(ints),
        T.pack_sequence([torch.tensor([1, 2, 3]), torch.tensor([4, 5]), torch.tensor([6])]),
    )
    _raises_like(
        lambda: K.pack_sequence([kiln.ones(2), kiln.ones(3)]),
        lambda: T.pack_sequence([torch.ones(2), torch.ones(3)]),
        "must be sorted in decreasing order",
    )


def test_invert_permutation():
    perm = [3, 0, 4, 1, 2]
    _same(K.invert_permutation(kiln.tensor(perm)), T.invert_permutation(torch.tensor(perm)))
    assert K.invert_permutation(None) is None


# ---- PackedSequence itself -----------------------------------------------------------------------


def test_packed_sequence_class():
    x = RNG.standard_normal((3, 3, 2)).astype(np.float32)
    kp = K.pack_padded_sequence(kiln.tensor(x), [2, 3, 1], enforce_sorted=False)
    tp = T.pack_padded_sequence(torch.tensor(x), [2, 3, 1], enforce_sorted=False)
    assert kp._fields == tp._fields == ("data", "batch_sizes", "sorted_indices", "unsorted_indices")
    assert repr(kp).startswith("PackedSequence(data=tensor(")
    assert not kp.is_cuda and not kp.is_pinned()
    assert kp.to(kiln.float32) is kp and kp.cpu() is kp and kp.float() is kp
    assert kp.to("cpu") is kp and kp.to(device="cpu", dtype=kiln.float32) is kp
    for name in ("double", "half", "long", "int", "short", "char", "byte"):
        k, t = getattr(kp, name)(), getattr(tp, name)()
        assert type(k) is K.PackedSequence
        _same_packed(k, t)
    k, t = kp.to(dtype=kiln.float64), tp.to(dtype=torch.float64)
    _same_packed(k, t)
    assert k.batch_sizes is kp.batch_sizes  # batch_sizes never converts
    # The (data, batch_sizes) spelling and its argument check.
    k = K.PackedSequence((kp.data, kp.batch_sizes), sorted_indices=kp.sorted_indices)
    t = T.PackedSequence((tp.data, tp.batch_sizes), sorted_indices=tp.sorted_indices)
    _same_packed(k, t)
    _raises_like(
        lambda: K.PackedSequence(kp.data),
        lambda: T.PackedSequence(tp.data),
        "Expected data to be a list or tuple of length 2",
    )
    data, batch_sizes, sorted_indices, unsorted_indices = kp
    assert data is kp.data and unsorted_indices is kp.unsorted_indices
    assert isinstance(kp, tuple) and len(kp) == 4


def test_importable_as_torch_spells_it():
    import kiln.nn.utils.rnn as mod

    assert kiln.nn.utils.rnn is mod
    assert set(mod.__all__) == set(T.__all__)
    assert all(callable(getattr(mod, n)) for n in mod.__all__)


# ---- the recurrent layers on packed input --------------------------------------------------------


def _twins(name, *args, **kwargs):
    t = getattr(torch.nn, name)(*args, **kwargs).double()
    k = getattr(kiln.nn, name)(*args, **kwargs, dtype=kiln.float64)
    k.load_state_dict({n: kiln.tensor(v.detach().numpy()) for n, v in t.state_dict().items()})
    return k, t


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _flat(o)]
    return [out]


def _map(hx, fn):
    return tuple(fn(a) for a in hx) if isinstance(hx, tuple) else fn(hx)


def _run_packed(lib, utils, module, x, lengths, hx, batch_first, enforce_sorted):
    """Pack, run, re-pad; return (padded output, final state, leaf tensors for gradients)."""
    leaf = lib.tensor(x, requires_grad=True)
    h = None if hx is None else _map(hx, lambda a: lib.tensor(a, requires_grad=True))
    packed = utils.pack_padded_sequence(leaf, lengths, batch_first, enforce_sorted)
    out, final = module(packed, h)
    assert isinstance(out, utils.PackedSequence)
    assert out.batch_sizes is packed.batch_sizes
    assert out.sorted_indices is packed.sorted_indices
    assert out.unsorted_indices is packed.unsorted_indices
    padded, _ = utils.pad_packed_sequence(out, batch_first)
    return padded, final, leaf, h


def _compare_packed(name, options, lengths, with_hx, enforce_sorted=False):
    k, t = _twins(name, 3, 5, **options)
    batch_first = options.get("batch_first", False)
    steps, batch = max(lengths) + 1, len(lengths)  # one step of padding past the longest
    x = RNG.standard_normal((batch, steps, 3) if batch_first else (steps, batch, 3))
    hx = None
    if with_hx:
        layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
        out_size = options.get("proj_size") or 5
        h = RNG.standard_normal((layers, batch, out_size))
        hx = (h, RNG.standard_normal((layers, batch, 5))) if name == "LSTM" else h
    kout, kfin, kx, kh = _run_packed(kiln, K, k, x, lengths, hx, batch_first, enforce_sorted)
    tout, tfin, tx, th = _run_packed(torch, T, t, x, lengths, hx, batch_first, enforce_sorted)
    _same(kout, tout)
    for a, b in zip(_flat(kfin), _flat(tfin), strict=True):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-9, atol=1e-12)
    # A loss reaching the output and every final state, weighted so no gradient is symmetric.
    w = RNG.standard_normal(tuple(tout.shape))
    kloss = (kout * kiln.tensor(w)).sum() + sum((o * o).sum() for o in _flat(kfin))
    tloss = (tout * torch.tensor(w)).sum() + sum((o * o).sum() for o in _flat(tfin))
    kloss.backward()
    tloss.backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    for (n, kp), (_, tp) in zip(k.named_parameters(), t.named_parameters(), strict=True):
        np.testing.assert_allclose(
            kp.grad.numpy(), tp.grad.numpy(), rtol=1e-8, atol=1e-10, err_msg=n
        )
    if with_hx:
        for a, b in zip(_flat(kh), _flat(th), strict=True):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8, atol=1e-10)


LAYER_OPTIONS = [
    {},
    {"num_layers": 2},
    {"bidirectional": True},
    {"num_layers": 2, "bidirectional": True, "batch_first": True},
]


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("options", LAYER_OPTIONS)
@pytest.mark.parametrize("with_hx", [False, True])
def test_layers_on_packed_input_match_torch(name, options, with_hx):
    _compare_packed(name, options, [3, 5, 1, 5, 2], with_hx)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_layers_on_sorted_packed_input_match_torch(name):
    _compare_packed(name, {"bidirectional": True}, [4, 4, 2, 1], True, enforce_sorted=True)
    _compare_packed(name, {"num_layers": 2}, [1], False, enforce_sorted=True)  # batch of one


def test_lstm_projection_relu_rnn_and_no_bias_on_packed_input():
    _compare_packed(
        "LSTM", {"proj_size": 2, "num_layers": 2, "bidirectional": True}, [2, 4, 3], True
    )
    _compare_packed("RNN", {"nonlinearity": "relu", "bidirectional": True}, [2, 4, 3], False)
    _compare_packed("GRU", {"bias": False, "batch_first": True}, [2, 4, 3], True)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_plain_tensor_input_still_matches_torch(name):
    """The padded path shares the layer loop with the packed one."""
    k, t = _twins(name, 3, 4, num_layers=2, bidirectional=True, batch_first=True)
    x = RNG.standard_normal((2, 4, 3))
    kx, tx = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    kout, tout = k(kx), t(tx)
    for a, b in zip(_flat(kout), _flat(tout), strict=True):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-9, atol=1e-12)
    sum((o * o).sum() for o in _flat(kout)).backward()
    sum((o * o).sum() for o in _flat(tout)).backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_equal_lengths_packed_match_the_padded_path():
    kiln.manual_seed(3)
    m = kiln.nn.LSTM(3, 4, num_layers=2, bidirectional=True).double()
    x = kiln.randn(5, 3, 3, dtype=kiln.float64)
    ref, (h, c) = m(x)
    out, (hp, cp) = m(K.pack_padded_sequence(x, [5, 5, 5]))
    np.testing.assert_allclose(_np(K.pad_packed_sequence(out)[0]), ref.detach().numpy(), 1e-12)
    np.testing.assert_allclose(hp.detach().numpy(), h.detach().numpy(), 1e-12)
    np.testing.assert_allclose(cp.detach().numpy(), c.detach().numpy(), 1e-12)


def test_packed_input_errors():
    m = kiln.nn.GRU(2, 3)
    packed = K.pack_padded_sequence(kiln.randn(4, 3, 2), [4, 2, 1])
    with pytest.raises(RuntimeError, match="Expected hidden size \\(1, 3, 3\\), got \\[1, 2, 3\\]"):
        m(packed, kiln.zeros(1, 2, 3))
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
        m(K.pack_padded_sequence(kiln.randn(4, 3, 5), [4, 2, 1]))
    with pytest.raises(RuntimeError, match="input must have 2 dimensions, got 3"):
        m(K.PackedSequence(kiln.randn(7, 1, 2), packed.batch_sizes))
    with pytest.raises(TypeError, match="expected a kiln.Tensor or PackedSequence input"):
        m([1, 2])


def test_training_with_packed_input_and_dropout():
    kiln.manual_seed(4)
    m = kiln.nn.LSTM(2, 6, num_layers=2, dropout=0.3, batch_first=True)
    head = kiln.nn.Linear(6, 1)
    opt = kiln.optim.Adam(list(m.parameters()) + list(head.parameters()), lr=0.05)
    x = kiln.randn(8, 5, 2)
    lengths = [5, 3, 4, 1, 2, 5, 2, 3]
    mask = kiln.tensor([[float(t < n) for t in range(5)] for n in lengths]).unsqueeze(-1)
    y = (x * mask).sum((1, 2)).unsqueeze(-1)
    losses = []
    for _ in range(30):
        _, (h, _) = m(K.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
        loss = kiln.nn.functional.mse_loss(head(h[-1]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
