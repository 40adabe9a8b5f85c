"""kiln._assert (torch._assert): eager semantics, and under kiln.compile no graph break. A Python
condition (a shape check, guarded where the shape was read) is decided at capture time; a tensor
condition becomes a graph node that checks every run. A false condition raises AssertionError
with the message, as eager does: at run time after the ops before it (a graph break, so try
blocks and side effects behave as in eager code), or at capture time under fullgraph=True.
"""

import pytest
from corpus_util import RecordingBackend, assert_same, compiler_of, fresh_capture  # noqa: F401

import kiln
import kiln.nn as nn
from kiln._capture.backend_compiled import CpuBackend

C = kiln._C._capture


def rand(*shape, seed=0):
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


class PatchEmbed(nn.Module):
    """The checks torchvision's ViT makes: channels in forward, rank of the sequence."""

    def __init__(self, channels=3, dim=8) -> None:
        super().__init__()
        kiln._assert(dim % 2 == 0, "dim must be even")  # in __init__ too, like ViT
        self.channels = channels
        self.proj = nn.Linear(channels, dim)

    def forward(self, x):
        kiln._assert(x.shape[1] == self.channels,
                     f"Wrong number of channels! Expected {self.channels}")
        y = self.proj(x.transpose(1, 2))
        kiln._assert(y.dim() == 3, "Expected (batch_size, seq_length, hidden_dim)")
        return y.relu()


def model():
    kiln.manual_seed(0)
    return PatchEmbed().eval()


def captures_of(compiled):
    records = []
    compiler_of(compiled).recorder = records
    return records


# --- eager ---------------------------------------------------------------------------------------


def test_eager_true_conditions_return_none():
    assert kiln._assert(True, "never") is None
    assert kiln._assert(3 == 3, "never") is None
    assert kiln._assert(kiln.tensor([True]), "never") is None
    assert kiln._assert(kiln.tensor(1.5), "never") is None


@pytest.mark.parametrize("cond", [False, 0, kiln.tensor(False), kiln.tensor([0])])
def test_eager_false_conditions_raise_the_message(cond):
    with pytest.raises(AssertionError, match="^the message$"):
        kiln._assert(cond, "the message")


def test_eager_tensor_of_several_elements_is_ambiguous():
    with pytest.raises(RuntimeError, match="ambiguous"):
        kiln._assert(kiln.ones(2), "m")


def test_the_module_asserts_in_init():
    with pytest.raises(AssertionError, match="dim must be even"):
        PatchEmbed(dim=7)


# --- compiled: Python conditions -----------------------------------------------------------------


def test_shape_assertions_are_one_graph_without_breaks():
    m, x = model(), rand(2, 3, 5)
    out = kiln.explain(m)(x)
    assert out.graph_count == 1 and out.graph_break_count == 0, out.break_reasons
    # Decided at capture time: not a node, but the shape it read is guarded.
    assert not any("_assert" in op for op in out.ops_per_graph[0])
    assert any("L['x']" in g for g in out.guards), out.guards
    assert_same(out.result, m(x))  # both record autograd: the parameters require grad


def test_compiled_shape_assertions_match_eager_and_capture_once():
    m = model()
    backend = RecordingBackend()
    compiled = kiln.compile(m, backend=backend)
    records = captures_of(compiled)
    x = rand(2, 3, 5)
    with kiln.no_grad():
        for _ in range(3):
            assert_same(compiled(x), m(x))
    assert len(backend.graphs) == 1 and len(records) == 1
    assert records[0].break_record is None
    assert len(C.entries(PatchEmbed.forward.__code__)) == 1


def test_shape_assertions_under_a_dynamic_batch_do_not_break():
    m = model()
    compiled = kiln.compile(m, backend="eager")
    records = captures_of(compiled)
    with kiln.no_grad():
        for b in (2, 3, 4, 5):
            x = rand(b, 3, 5, seed=b)
            assert_same(compiled(x), m(x))
    assert [r.break_record for r in records] == [None] * len(records)
    assert len(records) == 2  # static, then dim 0 dynamic


@pytest.mark.parametrize("backend", [None, "eager"])
def test_false_shape_assertion_raises_the_message(backend):
    m = model()
    compiled = kiln.compile(m, backend=backend)
    with kiln.no_grad():
        compiled(rand(2, 3, 5))
        with pytest.raises(AssertionError, match="^Wrong number of channels! Expected 3$"):
            compiled(rand(2, 4, 5))
        with pytest.raises(AssertionError, match="Expected 3$"):  # the entry it left, again
            compiled(rand(2, 4, 5))
        assert_same(compiled(rand(2, 3, 5)), m(rand(2, 3, 5)))  # the good entry still works


def test_false_assertion_under_fullgraph_is_an_assertion_error():
    compiled = kiln.compile(model(), backend="eager", fullgraph=True)
    with kiln.no_grad(), pytest.raises(AssertionError, match="Wrong number of channels"):
        compiled(rand(2, 4, 5))


def catches(x):
    y = x * 2
    try:
        kiln._assert(x.shape[0] == 3, "not 3 rows")
        y = y + 1
    except AssertionError as e:
        return y - 1, str(e)
    return y, "ok"


def test_false_assertion_is_caught_by_the_frames_try_block():
    compiled = kiln.compile(catches, backend="eager")
    for rows in (3, 2):
        x = rand(rows, 4)
        assert_same(compiled(x), catches(x))


def mutate_then_assert(x, buf):
    buf.add_(1)
    kiln._assert(x.shape[0] == 3, "not 3 rows")
    return x + buf


def test_ops_before_a_false_assertion_run_once():
    compiled = kiln.compile(mutate_then_assert, backend="eager")
    buf = kiln.zeros(4)
    with pytest.raises(AssertionError, match="not 3 rows"):
        compiled(rand(2, 4), buf)
    assert buf.tolist() == [1.0] * 4  # as eager: the add_ happened, once


# --- compiled: tensor conditions -----------------------------------------------------------------


def bounded(x):
    y = x * 2
    kiln._assert(y.abs().sum() < 1000, "values out of range")
    return y + 1


@pytest.mark.parametrize("backend", [None, "eager"])
def test_tensor_assertion_is_a_node_of_the_one_graph(backend):
    x = rand(3, 4)
    out = kiln.explain(bounded)(x)
    assert out.graph_count == 1 and out.graph_break_count == 0, out.break_reasons
    assert "kiln._assert" in out.ops_per_graph[0]
    compiled = kiln.compile(bounded, backend=backend)
    records = captures_of(compiled)
    assert_same(compiled(x), bounded(x))
    with pytest.raises(AssertionError, match="^values out of range$"):
        compiled(x * 1000)  # same guards: the node itself raises
    assert len(records) == 1 and records[0].break_record is None
    assert_same(compiled(x), bounded(x))


def test_tensor_assertion_false_at_capture_breaks_and_raises():
    compiled = kiln.compile(bounded, backend="eager")
    with pytest.raises(AssertionError, match="values out of range"):
        compiled(rand(3, 4) * 1000)
    x = rand(3, 4)
    assert_same(compiled(x), bounded(x))


def test_tensor_assertion_node_runs_eagerly_between_compiled_parts():
    backend = CpuBackend(fallback=False)  # a decline would raise
    graphs = []
    compiled = kiln.compile(bounded, backend=lambda g, ex: graphs.append(g) or backend(g, ex))
    x = rand(3, 4)
    assert_same(compiled(x), bounded(x))
    (report,) = backend.reports
    (graph,) = graphs
    by_name = {n.name: n for n in graph.nodes}
    assert [by_name[name].target for name in report.eager] == [kiln._assert]
    # the assertion is the one node on an eager kernel, and the report says why
    assert [(target, reason) for _, target, reason in report.fallbacks] == [
        ("kiln._assert", "an effect (printing, global state, an assertion) that runs as the code "
                         "runs it")]  # fmt: skip
    assert report.compiled_nodes == graph.op_count() - 1
    with pytest.raises(AssertionError, match="^values out of range$"):
        compiled(x * 1000)


# compiled from text: pytest rewrites the assert statements of test modules
_CHECKED = """
def checked_tanh(x, limit):
    y = kiln.tanh(x) * limit
    assert (y.abs() <= 1).all(), "activation out of range"
    assert (y == y).all()
    return y * 2
"""
_namespace = {"kiln": kiln}
exec(compile(_CHECKED, "<checked_tanh>", "exec"), _namespace)  # noqa: S102
checked_tanh = _namespace["checked_tanh"]


def test_a_python_assert_on_a_tensor_is_a_check_node():
    # torch.compile keeps such asserts in the graph (_assert_async); a Python `if` on a tensor
    # would break the graph
    compiled = kiln.compile(checked_tanh)
    out = kiln.explain(checked_tanh)(kiln.randn(4), 1.0)
    assert (out.graph_count, out.graph_break_count) == (1, 0), out.break_reasons
    x = kiln.randn(4)
    assert kiln.allclose(compiled(x, 1.0), checked_tanh(x, 1.0), atol=1e-6)
    with pytest.raises(AssertionError, match="activation out of range"):
        compiled(kiln.full((4,), 3.0), 5.0)  # fails at run time, in the cached graph's check
    with pytest.raises(AssertionError, match="activation out of range"):
        checked_tanh(kiln.full((4,), 3.0), 5.0)
