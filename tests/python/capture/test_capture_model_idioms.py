"""Python idioms of model files that broke the graph: tuples built up from `()` (Hugging Face's
all_hidden_states), shapes compared as tuples once sizes are symbolic, an assertion whose
message is an f-string of a symbolic shape (torchvision's ViT), and the module-level metadata
functions (kiln.is_tensor, kiln.is_floating_point, kiln.numel)."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend


def one_graph(fn, *calls):
    """fn compiled, called with each argument tuple: equal to eager, one graph, no break."""
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    for args in calls:
        got, want = compiled(*args), fn(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,), strict=True):
            if isinstance(w, tuple):
                assert all(kiln.equal(a, b) for a, b in zip(g, w, strict=True))
            else:
                assert kiln.allclose(g, w)
    explained = kiln.explain(fn)(*calls[0])
    assert explained.graph_break_count == 0, explained.break_reasons


def test_a_tuple_built_up_from_an_empty_one():
    def f(x, output_hidden_states=True):
        all_hidden = () if output_hidden_states else None
        for _ in range(3):
            all_hidden = all_hidden + (x,)
            x = x * 2 + 1
        return x, all_hidden

    one_graph(f, (kiln.randn(4),))


def test_shapes_compared_as_tuples_with_symbolic_sizes():
    def f(x, g):
        if g.shape[:2] != x.shape[:2]:
            g = kiln.zeros(x.shape[0], x.shape[1], 1)
        return x + g

    one_graph(f, *[(kiln.randn(b, 4, 8), kiln.zeros(b, 4, 1)) for b in (2, 3, 5)])


def test_an_assertion_message_formatted_from_a_symbolic_shape():
    def f(x):
        kiln._assert(x.dim() == 3, f"Expected (batch, seq, hidden) got {x.shape}")
        return x * 2

    one_graph(f, *[(kiln.randn(b, 4, 8),) for b in (2, 3, 5)])
    with pytest.raises(AssertionError, match=r"got kiln.Size\(\[2, 4\]\)"):
        kiln.compile(f)(kiln.randn(2, 4))


def test_a_run_time_string_used_otherwise_breaks():
    def f(x):
        name = f"{x.shape[0]}"
        return x * int(name)

    kiln.compile(f, dynamic=True)(kiln.randn(3))  # runs, breaking where the text is needed
    explained = kiln.explain(f)(kiln.randn(3))
    assert explained.graph_count >= 1


def test_module_level_metadata_functions():
    def f(x, t):
        if not kiln.is_tensor(t):
            t = kiln.full((1,), t)
        if kiln.is_floating_point(x):
            x = x * kiln.numel(x)
        return x * t

    one_graph(f, (kiln.randn(4), kiln.tensor(3.0)))
    assert kiln.compile(f)(kiln.randn(4), 2.0).shape == (4,)


@pytest.mark.parametrize("move", ["to_device", "to_other", "cpu", "to_same_dtype"])
def test_same_device_moves_compile(move):
    """t.to(x.device), t.to(x), t.cpu() and t.to(t.dtype) of CPU tensors return the tensor
    itself (diffusers' timesteps.to(sample.device)): compiled as a view, not an eager node."""
    moves = {"to_device": lambda t, x: t.to(x.device), "to_other": lambda t, x: t.to(x),
             "cpu": lambda t, x: t.cpu(), "to_same_dtype": lambda t, x: t.to(kiln.float32)}
    backend = CpuBackend(fallback=False)

    def f(x, t):
        moved = moves[move](t, x)
        moved.add_(1)  # writes through to t, as the tensor itself would
        return x * moved

    x, t = kiln.randn(3, 4), kiln.randn(4)
    t_ref = t.clone()
    got, want = kiln.compile(f, backend=backend)(x, t), f(x, t_ref)
    assert kiln.allclose(got, want) and kiln.equal(t, t_ref)
    assert [r.eager_nodes for r in backend.reports] == [0]


LITERALS = {
    "scalar": lambda x: x * kiln.tensor(2.0),
    "int_scalar": lambda x: x * kiln.tensor(3),
    "vector": lambda x: x + kiln.tensor([1.0, 2.0, 3.0]),
    "index_list": lambda x: x[:, kiln.tensor([2, 0])],
    "matrix_as_tensor": lambda x: x * kiln.as_tensor([[1, 2, 3]], dtype=kiln.float64),
    "bool": lambda x: (x > 0) & kiln.tensor(True),
    "from_shape": lambda x: x[..., :2] / kiln.tensor([x.shape[1], x.shape[0]], dtype=kiln.float32),
}


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_tensors_of_literal_numbers_compile(name):
    """kiln.tensor / as_tensor of numbers the code spells (DETR's box scale, gains, index lists)
    are built in the graph: no break, no eager node, eager's dtypes."""
    fn = LITERALS[name]
    backend = CpuBackend(fallback=False)
    x = kiln.randn(2, 3)
    got, want = kiln.compile(fn, backend=backend)(x), fn(x)
    assert got.dtype == want.dtype and kiln.equal(got, want)
    assert [r.eager_nodes for r in backend.reports] == [0]
    assert kiln.explain(fn)(x).graph_break_count == 0


def test_tensor_of_run_time_data_still_breaks():
    def f(x):
        return kiln.tensor(x.tolist()) * 2

    explained = kiln.explain(f)(kiln.randn(3))
    assert explained.graph_break_count >= 1
    assert kiln.equal(kiln.compile(f)(kiln.ones(3)), f(kiln.ones(3)))


def test_a_tensor_of_symbolic_sizes_compiles():
    """kiln.tensor([w, h, w, h]) of sizes that vary between calls (automatic dynamic)."""
    def f(x):
        h, w = x.shape[-2:]
        return x[..., :4] / kiln.tensor([w, h, w, h], dtype=kiln.float32)

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(f, backend=backend)
    for rows in (5, 6, 7):
        x = kiln.randn(2, rows, 8)
        assert kiln.allclose(compiled(x), f(x))
    assert len(backend.reports) == 2 and all(r.eager_nodes == 0 for r in backend.reports)


class CausalConv1d(kiln.nn.Conv1d):
    """WaveNet/Tacotron's layer, in the older spelling: two-argument super() and a
    name-mangled attribute."""

    def __init__(self, cin, cout, k, dilation=1):
        self.__padding = (k - 1) * dilation
        super(CausalConv1d, self).__init__(cin, cout, k, padding=self.__padding,  # noqa: UP008
                                           dilation=dilation)

    def forward(self, x):
        return super(CausalConv1d, self).forward(x)[:, :, :-self.__padding]  # noqa: UP008


def test_two_argument_super_is_captured():
    kiln.manual_seed(0)
    model = kiln.nn.Sequential(CausalConv1d(4, 4, 2, 1), CausalConv1d(4, 4, 2, 2))
    x = kiln.randn(2, 4, 16)
    out = kiln.explain(model)(x)
    assert (out.graph_count, out.graph_break_count) == (1, 0)
    assert kiln.allclose(out.result, model(x), atol=1e-6)


@pytest.mark.parametrize("spelling", ["parametrizations", "legacy"])
def test_weight_norm_compiles_with_no_eager_node(spelling):
    # WaveNet/HiFi-GAN convolutions: the weight is g * v / ||v||, recomputed on every call
    kiln.manual_seed(0)
    conv = kiln.nn.Conv1d(4, 4, 3, padding=1)
    if spelling == "parametrizations":
        conv = kiln.nn.utils.parametrizations.weight_norm(conv)
    else:
        conv = kiln.nn.utils.weight_norm(conv)
    x = kiln.randn(2, 4, 16)
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(conv, backend=backend)
    got = compiled(x)
    assert kiln.allclose(got, conv(x), atol=1e-6)
    assert [r.eager_nodes for r in backend.reports] == [0]
    got.sum().backward()
    assert all(p.grad is not None for p in conv.parameters())
