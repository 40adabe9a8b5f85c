"""kiln.nn.RNN / LSTM / GRU and the cells against torch: parameter names, outputs, final states
and gradients from the same weights, for every layout option, and torch's argument errors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

RNG = np.random.default_rng(5)


def _twins(name, *args, **kwargs):
    t = getattr(torch.nn, name)(*args, **kwargs).double()
    k = getattr(kiln.nn, name)(*args, **kwargs, dtype=kiln.float64)
    assert list(k.state_dict()) == list(t.state_dict())
    assert repr(k) == repr(t)
    k.load_state_dict({n: kiln.tensor(v.detach().numpy()) for n, v in t.state_dict().items()})
    return k, t


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _flat(o)]
    return [out]


def _close(kout, tout):
    for a, b in zip(_flat(kout), _flat(tout), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-12)


def _compare(k, t, x, hx=None):
    kx = kiln.tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    kh = None if hx is None else _map(hx, lambda a: kiln.tensor(a, requires_grad=True))
    th = None if hx is None else _map(hx, lambda a: torch.tensor(a, requires_grad=True))
    kout, tout = k(kx, kh), t(tx, th)
    _close(kout, tout)
    # A loss that reaches every output: the sequence and each final state.
    kloss = sum((o * o).sum() for o in _flat(kout))
    tloss = sum((o * o).sum() for o in _flat(tout))
    kloss.backward()
    tloss.backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    for (n, kp), (_, tp) in zip(k.named_parameters(), t.named_parameters(), strict=True):
        np.testing.assert_allclose(
            kp.grad.numpy(), tp.grad.numpy(), rtol=1e-8, atol=1e-10, err_msg=n
        )
    if hx is not None:
        for a, b in zip(_flat(kh), _flat(th), strict=True):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8, atol=1e-10)


def _map(hx, fn):
    return tuple(fn(a) for a in hx) if isinstance(hx, tuple) else fn(hx)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"num_layers": 2},
        {"bidirectional": True},
        {"num_layers": 2, "bidirectional": True, "batch_first": True},
        {"bias": False},
    ],
)
def test_layers_match_torch(name, options):
    k, t = _twins(name, 5, 7, **options)
    x = RNG.standard_normal((3, 4, 5) if options.get("batch_first") else (4, 3, 5))
    _compare(k, t, x)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_initial_state_and_unbatched_input(name):
    k, t = _twins(name, 3, 6, num_layers=2)
    h = RNG.standard_normal((2, 2, 6))
    hx = (h, RNG.standard_normal((2, 2, 6))) if name == "LSTM" else h
    _compare(k, t, RNG.standard_normal((5, 2, 3)), hx)
    k, t = _twins(name, 3, 6)
    _compare(k, t, RNG.standard_normal((5, 3)))  # (L, H_in): no batch dim


def test_lstm_projection_and_relu_rnn():
    k, t = _twins("LSTM", 4, 6, proj_size=2, num_layers=2, bidirectional=True)
    _compare(k, t, RNG.standard_normal((3, 2, 4)))
    k, t = _twins("RNN", 4, 6, nonlinearity="relu")
    _compare(k, t, RNG.standard_normal((3, 2, 4)))
    k, t = _twins("RNN", 4, 6, 2, "relu")  # torch's positional nonlinearity
    assert k.nonlinearity == "relu" and k.num_layers == 2


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch(name):
    k, t = _twins(name, 4, 5)
    x = RNG.standard_normal((3, 4))
    _compare(k, t, x)
    h = RNG.standard_normal((3, 5))
    _compare(k, t, x, (h, RNG.standard_normal((3, 5))) if name == "LSTMCell" else h)
    _compare(k, t, RNG.standard_normal(4))  # unbatched


def test_dropout_between_layers_only_in_training():
    kiln.manual_seed(0)
    m = kiln.nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = kiln.randn(6, 2, 3)
    m.eval()
    a, _ = m(x)
    b, _ = m(x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    m.train()
    c, _ = m(x)
    assert not np.allclose(a.detach().numpy(), c.detach().numpy())


def test_a_training_step_lowers_the_loss():
    kiln.manual_seed(1)
    m = kiln.nn.LSTM(2, 8, batch_first=True)
    head = kiln.nn.Linear(8, 1)
    opt = kiln.optim.Adam(list(m.parameters()) + list(head.parameters()), lr=0.05)
    x = kiln.randn(16, 5, 2)
    y = x.sum((1, 2)).unsqueeze(-1)
    losses = []
    for _ in range(30):
        out, _ = m(x)
        loss = kiln.nn.functional.mse_loss(head(out[:, -1]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]


def test_argument_errors_in_torch_words():
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        kiln.nn.LSTM(2, 3, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        kiln.nn.GRU(2, 0)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        kiln.nn.LSTM(2, 3, proj_size=3)
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        kiln.nn.RNN(2, 3, nonlinearity="gelu")
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        kiln.nn.RNN(2, 3, dropout=0.2)
    m = kiln.nn.LSTM(2, 3)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
        m(kiln.randn(4, 1, 5))
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D, got 4D"):
        m(kiln.randn(4, 1, 1, 2))
    with pytest.raises(RuntimeError, match="Expected hidden size \\(1, 1, 3\\), got \\[1, 2, 3\\]"):
        m(kiln.randn(4, 1, 2), (kiln.zeros(1, 2, 3), kiln.zeros(1, 2, 3)))
    with pytest.raises(RuntimeError, match="hx should also be 2-D"):
        m(kiln.randn(4, 2), (kiln.zeros(1, 1, 3), kiln.zeros(1, 1, 3)))


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_compiles_into_one_part_with_no_eager_node(name):
    from kiln._capture.backend_compiled import CpuBackend

    kiln.manual_seed(2)
    m = getattr(kiln.nn, name)(6, 8, num_layers=2, bidirectional=True, batch_first=True).eval()
    x = kiln.randn(3, 5, 6)
    backend = CpuBackend(fallback=False)  # a decline would raise
    with kiln.no_grad():
        ours = kiln.compile(m, backend=backend)(x)
        ref = m(x)
    for a, b in zip(_flat(ours), _flat(ref), strict=True):  # float32, fused vs op by op
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    (report,) = backend.reports
    assert report.eager_nodes == 0 and report.eager_calls == 0 and len(report.infos) == 1
