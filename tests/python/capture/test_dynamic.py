"""Dynamic shapes of kiln.compile: automatic dynamic (a size that changes becomes a symbol),
`dynamic=True/False`, `kiln.mark_dynamic` / `kiln.mark_static`, sizes 0 and 1 staying static,
shape arithmetic and shape-dependent Python control flow on symbols, dynamic int arguments.
"""

import numpy as np
import pytest
from corpus_util import assert_same, compiler_of, fresh_capture  # noqa: F401

import kiln
import kiln.nn as nn

C = kiln._C._capture


def rand(*shape, seed=0):
    """A reproducible float32 tensor."""
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


class Probe:
    """A compiled function and its capture records."""

    def __init__(self, fn, **compile_kw) -> None:
        self.fn = fn
        self.compiled = kiln.compile(fn, **compile_kw)
        self.records: list = []
        compiler_of(self.compiled).recorder = self.records

    def check(self, *args, expect_captures):
        """Compiled and eager agree on `args`; `expect_captures` captures so far."""
        assert_same(self.compiled(*args), self.fn(*args))
        assert len(self.records) == expect_captures, [r.recompile_reason for r in self.records]

    def guards(self, i=-1) -> list:
        return self.records[i].guards


def rowsum(x):
    return (x * 2).sum(0) + x.shape[0]


def test_automatic_dynamic_after_the_second_size():
    p = Probe(rowsum)
    p.check(rand(2, 3), expect_captures=1)
    assert "L['x']: tensor kiln.float32[2, 3] strides (3, 1) requires_grad=False" in p.guards()
    p.check(rand(3, 3), expect_captures=2)  # dim 0 changed: captured again with a symbol
    assert p.guards()[:2] == ["L['x']: tensor kiln.float32[s0, 3] strides (3, 1) "
                              "requires_grad=False", "L['x'].size(0) -> s0"]
    assert "s0 >= 2" in p.guards()
    for n in (4, 5, 17, 2):
        p.check(rand(n, 3, seed=n), expect_captures=2)  # one dynamic entry serves them all


def test_automatic_dynamic_only_on_the_dim_that_changed():
    p = Probe(rowsum)
    p.check(rand(2, 3), expect_captures=1)
    p.check(rand(2, 5), expect_captures=2)
    assert p.guards()[0].startswith("L['x']: tensor kiln.float32[2, s0]")
    p.check(rand(2, 7), expect_captures=2)
    p.check(rand(4, 7), expect_captures=3)  # dim 0 changes now: both dims symbolic
    assert p.guards()[0].startswith("L['x']: tensor kiln.float32[s0, s1]")
    p.check(rand(6, 9), expect_captures=3)


def test_dynamic_false_recompiles_every_size():
    p = Probe(rowsum, dynamic=False)
    for i, n in enumerate((2, 3, 4, 5)):
        p.check(rand(n, 3), expect_captures=i + 1)
    assert all("s0" not in g for r in p.records for g in r.guards)


def test_dynamic_true_is_symbolic_from_the_first_call():
    p = Probe(rowsum, dynamic=True)
    p.check(rand(4, 3), expect_captures=1)
    assert p.guards()[:3] == ["L['x']: tensor kiln.float32[s0, s1] strides (3, 1) "
                              "requires_grad=False", "L['x'].size(0) -> s0",
                              "L['x'].size(1) -> s1"]
    for shape in ((2, 2), (7, 3), (3, 11)):
        p.check(rand(*shape), expect_captures=1)


@pytest.mark.parametrize("dynamic", [None, True])
def test_sizes_zero_and_one_stay_static(dynamic):
    p = Probe(rowsum, dynamic=dynamic)
    p.check(rand(4, 3), expect_captures=1)
    p.check(rand(5, 3), expect_captures=1 if dynamic else 2)
    n = len(p.records)
    p.check(rand(1, 3), expect_captures=n + 1)  # 1 fails `s0 >= 2`: a static entry
    assert p.guards()[0].startswith("L['x']: tensor kiln.float32[1, ")
    p.check(rand(0, 3), expect_captures=n + 2)
    assert p.guards()[0].startswith("L['x']: tensor kiln.float32[0, ")
    p.check(rand(1, 3), expect_captures=n + 2)
    p.check(rand(6, 3), expect_captures=n + 2)


def test_mark_dynamic_makes_the_first_capture_symbolic():
    p = Probe(rowsum)
    x = rand(5, 3)
    kiln.mark_dynamic(x, 0)
    p.check(x, expect_captures=1)
    assert p.guards()[0].startswith("L['x']: tensor kiln.float32[s0, 3]")
    p.check(rand(6, 3), expect_captures=1)  # an unmarked tensor matches the symbolic entry
    p.check(rand(6, 4), expect_captures=2)  # dim 1 is still static


def test_mark_dynamic_several_dims_and_negative_index():
    p = Probe(rowsum)
    x = rand(5, 3)
    kiln.mark_dynamic(x, [0, -1])
    p.check(x, expect_captures=1)
    assert p.guards()[0].startswith("L['x']: tensor kiln.float32[s0, s1]")


def test_mark_static_wins_over_dynamic_true():
    p = Probe(rowsum, dynamic=True)
    x = rand(5, 3)
    kiln.mark_static(x, 0)
    p.check(x, expect_captures=1)
    assert p.guards()[0].startswith("L['x']: tensor kiln.float32[5, s0]")
    p.check(rand(6, 3), expect_captures=2)  # dim 0 was static in the first entry


def test_mark_dynamic_errors():
    with pytest.raises(TypeError, match="expect a kiln.Tensor"):
        kiln.mark_dynamic([1, 2], 0)
    with pytest.raises(IndexError, match="dim 2 out of range"):
        kiln.mark_dynamic(rand(2, 2), 2)
    with pytest.raises(IndexError):
        kiln.mark_static(rand(2), -2)


def shape_arithmetic(x):
    n, m = x.shape
    flat = x.view(n * m)
    rows = kiln.zeros(n) + x.sum(1)
    half = x[: n // 2]
    return flat, rows, x.numel(), half, x.reshape(-1, m).shape


def test_shape_arithmetic_on_symbols():
    p = Probe(shape_arithmetic, dynamic=True)
    p.check(rand(4, 3), expect_captures=1)
    source = p.records[0].graph.python_source()
    assert "sym_size(L_x, 0)" in source and "sym_size(L_x, 1)" in source
    for shape in ((5, 3), (6, 7), (2, 2)):
        p.check(rand(*shape), expect_captures=1)


def branch_on_size(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def test_python_branch_on_a_symbolic_size_guards_the_range():
    p = Probe(branch_on_size, dynamic=True)
    p.check(rand(3, 2), expect_captures=1)
    assert "s0 <= 4" in p.guards()
    p.check(rand(2, 2), expect_captures=1)
    p.check(rand(4, 2), expect_captures=1)
    p.check(rand(5, 2), expect_captures=2)
    assert "s0 >= 5" in p.guards()
    p.check(rand(9, 2), expect_captures=2)
    p.check(rand(3, 2), expect_captures=2)


def loop_over_rows(x):
    acc = x[0]
    for i in range(1, x.shape[0]):
        acc = acc + x[i] * i
    return acc


def odd_rows(x):
    acc = x[0]
    for i in range(1, x.shape[0]):
        if i % 2:  # the index as a Python value: the loop unrolls
            acc = acc + x[i] * i
    return acc


def test_a_loop_over_a_symbolic_size_is_one_loop_node():
    p = Probe(loop_over_rows)
    p.check(rand(2, 3), expect_captures=1)
    p.check(rand(3, 3), expect_captures=2)
    assert not any("==" in g for g in p.guards())  # the row count is read at run time
    for n in (4, 7, 2):
        p.check(rand(n, 3), expect_captures=2)


def test_size_used_as_a_python_int_specializes():
    p = Probe(odd_rows)
    p.check(rand(2, 3), expect_captures=1)
    p.check(rand(3, 3), expect_captures=2)
    assert "s0 == 3" in p.guards()  # the loop unrolled for s0 == 3 only
    p.check(rand(3, 3, seed=1), expect_captures=2)
    p.check(rand(4, 3), expect_captures=3)
    assert p.records[2].recompile_reason == "s0 == 3"


def add(x, y):
    return x + y


def test_two_symbolic_inputs_and_broadcasting():
    p = Probe(add)
    p.check(rand(2, 3), rand(2, 3, seed=1), expect_captures=1)
    p.check(rand(4, 3), rand(4, 3, seed=1), expect_captures=2)
    p.check(rand(6, 3), rand(6, 3, seed=1), expect_captures=2)
    p.check(rand(6, 3), rand(1, 3, seed=1), expect_captures=3)  # size 1 broadcasts: static
    with pytest.raises(RuntimeError, match="cannot be broadcast") as compiled_err:
        p.compiled(rand(5, 3), rand(6, 3))
    with pytest.raises(RuntimeError) as eager_err:
        add(rand(5, 3), rand(6, 3))
    assert str(compiled_err.value) == str(eager_err.value)


def times_n(x, n):
    return x * n + n


def test_int_argument_becomes_dynamic():
    p = Probe(times_n)
    p.check(rand(3), 2, expect_captures=1)
    assert "L['n'] == 2" in p.guards()
    p.check(rand(3), 3, expect_captures=2)
    assert "type(L['n']) is int" in p.guards()
    assert "L_n" in p.records[1].graph.python_source()  # n is a graph input now
    for n in (4, -7, 100, 0):
        p.check(rand(3), n, expect_captures=2)
    p.check(rand(3), 2.5, expect_captures=3)  # a float fails the type guard


def test_int_argument_stays_static_with_dynamic_false():
    p = Probe(times_n, dynamic=False)
    for i, n in enumerate((2, 3, 4)):
        p.check(rand(3), n, expect_captures=i + 1)


class MLP(nn.Module):
    """Two Linear layers; the batch size varies between calls."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        return self.b(self.a(x).relu())


def test_module_batch_size_becomes_dynamic():
    kiln.manual_seed(0)
    model = MLP()
    compiled = kiln.compile(model)
    records = []
    compiler_of(compiled).recorder = records
    for n in (2, 3, 4, 9, 31):
        x = rand(n, 4, seed=n)
        assert_same(compiled(x), model(x))
    assert len(records) == 2
    assert "L['x']: tensor kiln.float32[s0, 4] strides (4, 1) requires_grad=False" in (
        records[1].guards)
    text = records[1].graph.to_kir()
    assert "%L_x: f32[s0, 4]" in text
    kiln._C._ir.verify(text)


def test_dynamic_entry_is_reused_after_reset_only_when_sizes_change_again():
    p = Probe(rowsum)
    p.check(rand(2, 3), expect_captures=1)
    p.check(rand(3, 3), expect_captures=2)
    kiln.compiler.reset()  # forgets entries and the automatic-dynamic history
    p.check(rand(4, 3), expect_captures=3)
    assert p.guards()[0].startswith("L['x']: tensor kiln.float32[4, 3]")


def test_dynamic_results_match_numpy_on_many_sizes():
    p = Probe(shape_arithmetic)
    for n in range(2, 9):
        x = rand(n, 3, seed=n)
        flat, rows, numel, half, shape = p.compiled(x)
        a = x.numpy()
        np.testing.assert_allclose(flat.numpy(), a.reshape(-1), rtol=1e-6)
        np.testing.assert_allclose(rows.numpy(), a.sum(1), rtol=1e-5, atol=1e-6)
        assert numel == a.size and tuple(half.shape) == (n // 2, 3) and tuple(shape) == (n, 3)
    assert len(p.records) == 2


def test_strides_that_change_between_calls_recompile_once():
    """A decode loop passes x[:, -1:] of a growing sequence: same sizes, growing strides. The
    second capture stops guarding the strides and the entry makes the argument contiguous, so
    every later step runs the same entry."""
    from kiln._capture.backend_compiled import CpuBackend

    backend = CpuBackend()
    step = kiln.compile(lambda tok: (tok * 2 + 1).sum(-1), backend=backend)
    x = kiln.arange(8).reshape(2, 4)
    for _ in range(10):
        assert step(x[:, -1:]).tolist() == ((x[:, -1:] * 2 + 1).sum(-1)).tolist()
        x = kiln.cat([x, x[:, -1:] + 1], dim=1)
    assert len(backend.reports) == 2


def test_an_input_written_in_place_keeps_its_strides_guarded():
    """A contiguous copy would lose the write: such an input stays guarded on its strides."""
    def bump(t):
        t.add_(1)
        return t * 2

    compiled = kiln.compile(bump)
    for width in range(4, 9):
        base = kiln.zeros(2, width)
        view = base[:, -1:]
        out = compiled(view)
        assert base[:, -1].tolist() == [1.0, 1.0] and out.tolist() == [[2.0], [2.0]]


def test_two_sizes_found_equal_stay_symbolic_and_are_guarded():
    # gpt-fast's KVCache.update: `assert input_pos.shape[0] == k_val.shape[2]`
    def update(k_val, input_pos):
        assert input_pos.shape[0] == k_val.shape[2]
        return k_val * 2 + input_pos[-1]

    compiled = kiln.compile(update)
    records: list = []
    compiler_of(compiled).recorder = records
    for n in range(3, 12):
        k, pos = kiln.randn(1, 2, n, 4), kiln.arange(n).float()
        assert kiln.allclose(compiled(k, pos), update(k, pos))
    assert len(records) == 2  # static, then one symbolic graph for every length
    with pytest.raises(AssertionError):  # the relation is a guard: a mismatch is not served
        compiled(kiln.randn(1, 2, 5, 4), kiln.arange(6).float())


def window_mean(x):
    xb = x[9:12]
    return xb.sum(0) / len(xb)  # len(xb) is 3 while the slice's end is within the rows


def window_from(x, start: int):
    xb = x[start:start + 3]
    return xb * xb.shape[0]


def test_a_slice_end_the_rules_assumed_within_the_size_is_guarded():
    """Typing `x[9:12]` over a symbolic length takes its end to be within the size, and the
    capture bakes the length 3 (len(xb)); the assumption `12 <= s0` is guarded, so a call where
    the end clips captures again instead of dividing by 3."""
    p = Probe(window_mean)
    p.check(rand(12, 2), expect_captures=1)
    p.check(rand(14, 2), expect_captures=2)
    assert "12 <= s0 (assumed by a shape rule)" in p.guards()
    p.check(rand(20, 2), expect_captures=2)
    p.check(rand(11, 2), expect_captures=3)  # x[9:12] has 2 rows here
    assert p.records[-1].recompile_reason == "12 <= s0 (assumed by a shape rule)"


def test_assumptions_over_an_int_argument_bind_it():
    """`x[start:start + 3]` with a dynamic `start`: the relation names the int's symbol, which
    the guards bind to the argument's value."""
    p = Probe(window_from)
    p.check(rand(10, 2), 0, expect_captures=1)
    p.check(rand(10, 2), 1, expect_captures=2)
    for start in (2, 5, 7):
        p.check(rand(10, 2), start, expect_captures=2)
    p.check(rand(10, 2), 8, expect_captures=3)  # two rows left: not the captured program


def rope_cache_check(k, past):
    seq_len = k.shape[-2] + past.shape[-2]  # HF RoPE: grow the cos/sin cache past its size
    if seq_len > 64:
        return k * 2
    return k + past.sum()


def max_keepdim_and_topk(x):
    return x.max(1, keepdim=True)[0] + x.topk(2, dim=1)[0].sum(1, keepdim=True)


def test_a_comparison_of_a_sum_of_sizes_is_guarded_as_a_relation():
    """`k.shape[-2] + past.shape[-2] > 64` guards `s0 + s1 <= 64`, not each size's value: a
    decode loop whose cache grows does not capture again at every step."""
    p = Probe(rope_cache_check)
    p.check(rand(1, 4, 8), rand(1, 2, 8), expect_captures=1)
    for n in range(3, 10):
        p.check(rand(1, 4, 8), rand(1, n, 8), expect_captures=2)
    assert any("<= 64 (a comparison)" in g for g in p.guards())
    p.check(rand(1, 4, 8), rand(1, 70, 8), expect_captures=3)  # the other side of the branch


def test_max_with_keepdim_and_topk_keep_the_reduced_dim_symbolic():
    """max(x, d, keepdim=True) and topk return two pieces whatever the size along d: no
    piece-count guard pins it."""
    p = Probe(max_keepdim_and_topk)
    p.check(rand(2, 5), expect_captures=1)
    for n in (6, 9, 12):
        p.check(rand(2, n), expect_captures=2)


def diag_of_dynamic(a, b):
    d = np.diag(a)  # n = min(rows, cols): a Python min() of two sizes
    return (b - (a - np.diagflat(d)) @ b) / d


def test_min_of_sizes_keeps_them_symbolic():
    """Python's min()/max() over sizes decide by guarded relations and return the winning
    size as a symbol: a Jacobi step over np.diag compiles once for every n."""
    p = Probe(diag_of_dynamic)
    for k, n in enumerate((10, 12, 14, 16, 20)):
        a = np.random.default_rng(n).random((n, n)) + n * np.eye(n)
        b = np.random.default_rng(n + 1).random(n)
        np.testing.assert_allclose(p.compiled(a, b), diag_of_dynamic(a, b), rtol=1e-12)
        assert len(p.records) == min(k + 1, 2)


def test_sizes_assumed_equal_are_one_symbol_in_the_kernel(capsys):
    """A stencil's coefficient array and the slices it multiplies have sizes the broadcast
    assumes equal (a guard checks it): compiled with one symbol per size, the loads stay affine
    (no floordiv/mod decode per element), and a call with a mismatched array still raises."""
    from kiln._capture import logs

    def stencil(x, c):
        return x[1:-1, 1:-1, :] - c * (x[2:, 1:-1, :] - x[:-2, 1:-1, :])

    g = np.random.default_rng(0)
    probe = Probe(stencil)
    logs.configure("+output_code")
    try:
        for n, k in [(10, 5), (16, 7), (21, 4)]:
            x, c = g.random((n, n, k)), g.random((n - 2, n - 2, k))
            np.testing.assert_allclose(probe.compiled(x, c), stencil(x, c), rtol=1e-12)
    finally:
        logs.configure()
    assert len(probe.records) == 2, [r.recompile_reason for r in probe.records]
    dynamic = capsys.readouterr().err.split("compiled part stencil_1_part0")[1]
    loads = [line for line in dynamic.split("// kiln loop program")[0].splitlines()
             if "= load " in line]
    assert len(loads) == 4 and not any("floordiv" in line or "mod" in line for line in loads)
    x, c = g.random((12, 12, 3)), g.random((9, 10, 3))
    with pytest.raises((ValueError, RuntimeError), match="broadcast"):
        probe.compiled(x, c)


def test_offset_slices_of_an_inlined_stencil_decode_without_division(capsys):
    """hdiff's `lap[1:, 1:J + 1] - lap[:-1, 1:J + 1]` of an inlined `lap` with symbolic sizes:
    the load's offset (a slice's starts times symbolic strides) splits over the dims, so the
    producer is replayed at affine indices, not at a floordiv/mod decode of the flat position."""
    from kiln._capture import logs

    def diff(a, out):
        i, j = out.shape[0], out.shape[1]
        lap = 4.0 * a[1:i + 3, 1:j + 3] - a[2:i + 4, 1:j + 3] - a[0:i + 2, 1:j + 3]
        out[:, :] = lap[1:i + 1, 1:j + 1] - lap[:-2, 1:j + 1]

    g = np.random.default_rng(1)
    probe = Probe(diff)
    logs.configure("+output_code")
    try:
        for n in (6, 9, 13):
            a, want, got = g.random((n + 4, n + 5)), np.zeros((n, n + 1)), np.zeros((n, n + 1))
            diff(a, want)
            probe.compiled(a, got)
            np.testing.assert_allclose(got, want, rtol=1e-12)
    finally:
        logs.configure()
    dynamic = capsys.readouterr().err.split("compiled part diff_1_part0")[1]
    loops = dynamic.split("// kiln loop program")[0]
    assert "= load " in loops and "floordiv" not in loops and " mod " not in loops
