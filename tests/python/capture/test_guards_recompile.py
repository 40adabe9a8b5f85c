"""Guards and recompiles of kiln.compile: each change of what a capture assumed recompiles
exactly once (and only then), the new entry gives eager's results, and the recompile limit
turns a frame eager with a warning that names the failing guard.

Entries are counted with `kiln._C._capture.entries(code)`; captures with the recorder of the
compiled function's Compiler (each record says which guard of the newest entry failed).
"""

import warnings

import numpy as np
import pytest
from corpus_util import assert_same, compiler_of, fresh_capture  # noqa: F401

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

C = kiln._C._capture


def rand(*shape, seed=0):
    """A reproducible float32 tensor."""
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


class Probe:
    """A compiled function plus its capture records and cache entries."""

    def __init__(self, fn, code=None, **compile_kw) -> None:
        self.fn = fn
        self.compiled = kiln.compile(fn, **compile_kw)
        self.records: list = []
        compiler_of(self.compiled).recorder = self.records
        self.code = code or fn.__code__

    def __call__(self, *args, **kwargs):
        return self.compiled(*args, **kwargs)

    @property
    def captures(self) -> int:
        return len(self.records)

    @property
    def entries(self) -> int:
        return len(C.entries(self.code))

    @property
    def reasons(self) -> list:
        return [r.recompile_reason for r in self.records]

    def check(self, *args, expect_captures, eager=None):
        """Calls compiled and eager (`eager` or the function itself) on `args`; asserts equal
        results and the capture count afterwards."""
        result = self(*args)
        assert_same(result, (eager or self.fn)(*args))
        assert self.captures == expect_captures, self.reasons
        return result


# -- tensor properties -----------------------------------------------------------------------


def scale_shift(x):
    return x * 2 + 1


def test_same_inputs_hit_the_cache():
    p = Probe(scale_shift)
    for seed in range(3):
        p.check(rand(3, 4, seed=seed), expect_captures=1)
    assert p.entries == 1
    assert p.reasons == [None]


def test_shape_change_recompiles_once_per_shape_when_static():
    p = Probe(scale_shift, dynamic=False)
    p.check(rand(3, 4), expect_captures=1)
    p.check(rand(3, 5), expect_captures=2)
    p.check(rand(3, 5), expect_captures=2)
    p.check(rand(3, 4), expect_captures=2)  # the first entry still serves [3, 4]
    p.check(rand(2, 4), expect_captures=3)
    assert p.entries == 3
    assert p.reasons[1] == "L['x']: tensor kiln.float32[3, 4] strides (4, 1) requires_grad=False"


def test_rank_change_recompiles():
    p = Probe(scale_shift)
    p.check(rand(3, 4), expect_captures=1)
    p.check(rand(12), expect_captures=2)
    p.check(rand(2, 3, 2), expect_captures=3)


@pytest.mark.parametrize("dtype", [kiln.float64, kiln.int64, kiln.float16, kiln.bool])
def test_dtype_change_recompiles(dtype):
    p = Probe(scale_shift)
    p.check(rand(3, 4), expect_captures=1)
    p.check(rand(3, 4).to(dtype), expect_captures=2)
    p.check(rand(3, 4).to(dtype), expect_captures=2)
    assert "kiln.float32[3, 4]" in p.reasons[1]


def test_transposed_input_recompiles():
    p = Probe(scale_shift, dynamic=False)
    p.check(rand(3, 4), expect_captures=1)
    t = rand(4, 3).t()
    assert tuple(t.shape) == (3, 4) and t.stride() == (1, 3)
    p.check(t, expect_captures=2)
    assert "strides (4, 1)" in p.reasons[1]
    p.check(rand(4, 3).t(), expect_captures=2)
    p.check(rand(3, 4), expect_captures=2)


def strided_sum(x):
    return x.sum(1) * x.stride(0)


def test_stride_read_as_a_value_is_guarded():
    p = Probe(strided_sum)
    p.check(rand(3, 4), expect_captures=1)
    p.check(rand(4, 3).t(), expect_captures=2)


def test_requires_grad_change_recompiles():
    p = Probe(scale_shift)
    p.check(rand(3), expect_captures=1)
    p.check(rand(3).requires_grad_(), expect_captures=2)
    assert "requires_grad=False" in p.reasons[1]
    p.check(rand(3), expect_captures=2)
    p.check(rand(3).requires_grad_(), expect_captures=2)


def test_grad_mode_change_recompiles():
    p = Probe(scale_shift)
    x = rand(3)
    p.check(x, expect_captures=1)
    with kiln.no_grad():
        p.check(x, expect_captures=2)
        assert not kiln.is_grad_enabled()
    assert p.reasons[1] == "grad mode is enabled"
    p.check(x, expect_captures=2)
    with kiln.no_grad():
        p.check(x, expect_captures=2)


# -- Python values: globals, closures, arguments ---------------------------------------------


FACTOR = 2
OFFSET = 0.5
MODE = "add"


def uses_globals(x):
    y = x * FACTOR + OFFSET
    return y + 1 if MODE == "add" else y - 1


@pytest.mark.parametrize("name,new,guard", [
    ("FACTOR", 3, "G['FACTOR'] == 2"),
    ("OFFSET", -1.25, "G['OFFSET'] == 0.5"),
    ("MODE", "sub", "G['MODE'] == 'add'"),
])
def test_global_value_change_recompiles(name, new, guard):
    old = globals()[name]
    p = Probe(uses_globals)
    try:
        p.check(rand(3), expect_captures=1)
        p.check(rand(3), expect_captures=1)
        globals()[name] = new
        p.check(rand(3), expect_captures=2)
        assert p.reasons[1] == guard
        globals()[name] = old
        p.check(rand(3), expect_captures=2)  # back to the first entry
    finally:
        globals()[name] = old


def relu_act(t):
    return t.relu()


def tanh_act(t):
    return t.tanh()


ACT = relu_act


def uses_global_function(x):
    return ACT(x) * 2


def test_global_function_identity_recompiles():
    global ACT
    p = Probe(uses_global_function)
    x = rand(5)
    try:
        p.check(x, expect_captures=1)
        ACT = tanh_act
        p.check(x, expect_captures=2)
        assert p.reasons[1] == "G['ACT'] is relu_act"
        ACT = relu_act
        p.check(x, expect_captures=2)
    finally:
        ACT = relu_act


def make_scaler(k):
    def scaler(x):
        return x * k

    return scaler


def test_closure_value_change_recompiles():
    scaler = make_scaler(2.0)
    p = Probe(scaler)
    x = rand(3)
    p.check(x, expect_captures=1)
    scaler.__closure__[0].cell_contents = 5.0
    out = p.check(x, expect_captures=2)
    assert_same(out, x * 5.0)
    assert p.reasons[1] == "C['k'] == 2.0"


def test_closures_of_the_same_code_share_entries_by_value():
    a, b = make_scaler(2.0), make_scaler(3.0)
    ca, cb = kiln.compile(a), kiln.compile(b)
    x = rand(3)
    assert_same(ca(x), x * 2.0)
    assert_same(cb(x), x * 3.0)
    assert_same(ca(x), x * 2.0)
    assert len(C.entries(a.__code__)) == 2  # one code object, one entry per closure value


def optional_bias(x, bias=None):
    return x if bias is None else x + bias


def test_none_versus_tensor_optional_argument():
    p = Probe(optional_bias)
    x = rand(3)
    p.check(x, expect_captures=1)
    p.check(x, rand(3, seed=1), expect_captures=2)
    assert p.reasons[1] == "L['bias'] is None"
    p.check(x, expect_captures=2)
    p.check(x, rand(3, seed=2), expect_captures=2)


def sum_list(xs):
    total = xs[0]
    for t in xs[1:]:
        total = total + t
    return total


def test_list_length_change_recompiles():
    p = Probe(sum_list)
    p.check([rand(2), rand(2)], expect_captures=1)
    p.check([rand(2, seed=3), rand(2, seed=4)], expect_captures=1)
    p.check([rand(2)] * 3, expect_captures=2)
    assert p.reasons[1] == "len(L['xs']) == 2"


def weighted(d):
    return sum(d[k] * (i + 1) for i, k in enumerate(d))


def test_dict_keys_change_recompiles():
    p = Probe(weighted)
    p.check({"a": rand(2), "b": rand(2)}, expect_captures=1)
    p.check({"a": rand(2, seed=5), "b": rand(2, seed=6)}, expect_captures=1)
    p.check({"b": rand(2), "a": rand(2)}, expect_captures=2)  # same keys, other order
    p.check({"a": rand(2)}, expect_captures=3)
    assert p.reasons[1] == "L['d'].keys() == ['a', 'b']"


def flag_arg(x, flag):
    return x + 1 if flag else x - 1


def mode_arg(x, mode):
    return x * 2 if mode == "double" else x


@pytest.mark.parametrize("fn,first,second", [
    (flag_arg, True, False),
    (mode_arg, "double", "same"),
    (flag_arg, 1.5, 0.0),
])
def test_python_argument_value_change_recompiles(fn, first, second):
    p = Probe(fn)
    x = rand(3)
    p.check(x, first, expect_captures=1)
    p.check(x, first, expect_captures=1)
    p.check(x, second, expect_captures=2)
    p.check(x, first, expect_captures=2)


def tuple_arg(x, sizes):
    return x.reshape(sizes)


def test_tuple_of_ints_argument():
    p = Probe(tuple_arg, dynamic=False)
    x = rand(12)
    p.check(x, (3, 4), expect_captures=1)
    p.check(x, (3, 4), expect_captures=1)
    p.check(x, (4, 3), expect_captures=2)
    assert p.reasons[1] == "L['sizes'][0] == 3"


GLOBAL_WEIGHT = kiln.ones(3)


def uses_global_tensor(x):
    return x * GLOBAL_WEIGHT


def test_global_tensor_is_read_at_run_time():
    global GLOBAL_WEIGHT
    p = Probe(uses_global_tensor)
    x = rand(3)
    saved = GLOBAL_WEIGHT
    try:
        p.check(x, expect_captures=1)
        GLOBAL_WEIGHT.mul_(3)  # same object, new values: no recompile, new results
        p.check(x, expect_captures=1)
        GLOBAL_WEIGHT = kiln.full((3,), 7.0)  # another tensor, same properties: an input
        p.check(x, expect_captures=1)
        GLOBAL_WEIGHT = kiln.full((3,), 7.0, dtype=kiln.float64)  # other properties
        p.check(x, expect_captures=2)
        assert p.reasons[1].startswith("G['GLOBAL_WEIGHT']: tensor kiln.float32[3]")
    finally:
        GLOBAL_WEIGHT = saved


# -- modules ------------------------------------------------------------------------------


class Scaled(nn.Module):
    """A Linear, a Python float attribute and a dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
        self.scale = 2.0

    def forward(self, x):
        return self.drop(self.fc(x)) * self.scale


def scaled_pair(seed=0):
    """Two Scaled modules with the same parameters (one to compile, one eager)."""
    kiln.manual_seed(seed)
    a = Scaled()
    b = Scaled()
    b.load_state_dict(a.state_dict())
    return a, b


def test_module_attribute_change_recompiles():
    mod, ref = scaled_pair()
    mod.eval(), ref.eval()
    p = Probe(mod, code=Scaled.forward.__code__)
    x = rand(2, 4)
    p.check(x, expect_captures=1, eager=ref)
    p.check(x, expect_captures=1, eager=ref)
    mod.scale = ref.scale = 3.0
    p.check(x, expect_captures=2, eager=ref)
    assert "attributes unchanged" in p.reasons[1]


def test_parameter_updated_in_place_needs_no_recompile():
    mod, ref = scaled_pair()
    mod.eval(), ref.eval()
    p = Probe(mod, code=Scaled.forward.__code__)
    x = rand(2, 4)
    p.check(x, expect_captures=1, eager=ref)
    with kiln.no_grad():
        for m in (mod, ref):
            m.fc.weight.mul_(-0.5)
            m.fc.bias.add_(1.0)
    p.check(x, expect_captures=1, eager=ref)


def test_submodule_replacement_recompiles():
    mod, ref = scaled_pair()
    mod.eval(), ref.eval()
    p = Probe(mod, code=Scaled.forward.__code__)
    x = rand(2, 4)
    p.check(x, expect_captures=1, eager=ref)
    kiln.manual_seed(9)
    mod.fc = nn.Linear(4, 4)
    ref.fc = nn.Linear(4, 4)
    ref.fc.load_state_dict(mod.fc.state_dict())
    p.check(x, expect_captures=2, eager=ref)


def test_eval_train_switch_recompiles_and_dropout_matches_eager():
    mod, ref = scaled_pair()
    p = Probe(mod, code=Scaled.forward.__code__)
    x = rand(2, 4)
    mod.eval(), ref.eval()
    p.check(x, expect_captures=1, eager=ref)
    mod.train(), ref.train()
    kiln.manual_seed(11)
    out = p(x)
    kiln.manual_seed(11)
    expected = ref(x)
    assert_same(out, expected)
    assert p.captures == 2
    zeros = (out.detach().numpy() == 0).sum()
    assert 0 < zeros < out.numel()  # dropout really dropped something
    mod.eval(), ref.eval()
    p.check(x, expect_captures=2, eager=ref)  # eval again: the first capture serves it


def test_new_instance_of_the_same_class_recompiles():
    a, b = scaled_pair(seed=1)
    kiln.manual_seed(2)
    other = Scaled()
    for m in (a, b, other):
        m.eval()
    ca = kiln.compile(a)
    co = kiln.compile(other)
    x = rand(2, 4)
    assert_same(ca(x), b(x))
    assert_same(co(x), other(x))
    assert len(C.entries(Scaled.forward.__code__)) == 2
    assert_same(ca(x), b(x))
    assert len(C.entries(Scaled.forward.__code__)) == 2


class Inner(nn.Module):
    """A submodule with a Python attribute read by the outer forward."""

    def __init__(self) -> None:
        super().__init__()
        self.power = 2

    def forward(self, x):
        return x ** self.power


class Outer(nn.Module):
    """Reads a nested attribute (`self.inner.power`) through a submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return F.relu(self.inner(x)) - 1


def test_nested_module_attribute_change_recompiles():
    mod = Outer()
    p = Probe(mod, code=Outer.forward.__code__)
    x = rand(3)
    p.check(x, expect_captures=1, eager=mod)
    mod.inner.power = 3
    out = p.check(x, expect_captures=2, eager=mod)
    assert_same(out, F.relu(x ** 3) - 1)


# -- recompile limit ----------------------------------------------------------------------


def times_n(x, n):
    return x * n


def test_recompile_limit_warns_then_runs_eagerly():
    p = Probe(times_n, dynamic=False)
    x = rand(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(8):
            p.check(x, n, expect_captures=n + 1)
        assert caught == []
        p.check(x, 8, expect_captures=8)  # the 9th value: limit reached
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "times_n hit the recompile limit (8)" in message
    assert "L['n'] == 7" in message  # the guard that failed (newest entry first)
    assert C.is_no_capture(times_n.__code__)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        for n in (9, 10, 3):
            p.check(x, n, expect_captures=8)
    assert p.entries == 8


def test_recompile_limit_option():
    p = Probe(times_n, dynamic=False, options={"recompile_limit": 2})
    x = rand(3)
    p.check(x, 1, expect_captures=1)
    p.check(x, 2, expect_captures=2)
    with pytest.warns(UserWarning, match=r"recompile limit \(2\).*L\['n'\] == 2"):
        p.check(x, 3, expect_captures=2)
    p.check(x, 1, expect_captures=2)  # existing entries are still used
    assert p.entries == 2


def test_recompile_limit_is_per_code_object():
    p = Probe(times_n, dynamic=False, options={"recompile_limit": 1})
    x = rand(3)
    p.check(x, 1, expect_captures=1)
    with pytest.warns(UserWarning):
        p.check(x, 2, expect_captures=1)
    q = Probe(scale_shift, options={"recompile_limit": 1})
    q.check(x, expect_captures=1)


def test_reset_clears_the_recompile_limit():
    p = Probe(times_n, dynamic=False, options={"recompile_limit": 1})
    x = rand(3)
    p.check(x, 1, expect_captures=1)
    with pytest.warns(UserWarning):
        p.check(x, 2, expect_captures=1)
    kiln.compiler.reset()
    assert not C.is_no_capture(times_n.__code__)
    p.check(x, 2, expect_captures=2)


def test_recompile_records_and_entry_order():
    p = Probe(times_n, dynamic=False)
    x = rand(3)
    for n in (1, 2, 3):
        p(x, n)
    assert p.reasons == [None, "L['n'] == 1", "L['n'] == 2"]
    guards = [gm.describe() for gm, _ in C.entries(times_n.__code__)]
    assert "L['n'] == 3" in guards[0]  # most recently used first
    p(x, 1)
    guards = [gm.describe() for gm, _ in C.entries(times_n.__code__)]
    assert "L['n'] == 1" in guards[0]


def test_guard_descriptions_are_readable():
    p = Probe(uses_globals)
    p(rand(3))
    guards = p.records[0].guards
    assert "L['x']: tensor kiln.float32[3] strides (1,) requires_grad=False" in guards
    assert "G['FACTOR'] == 2" in guards and "G['MODE'] == 'add'" in guards
    assert "grad mode is enabled" in guards
    assert np.all([isinstance(g, str) for g in guards])


def test_a_number_only_compared_is_guarded_on_the_comparison():
    """Teacher forcing (`random.random() < ratio` inside compiled code): once the drawn number
    varies (automatic dynamic), it is guarded on the comparison's outcome, not its value, so
    the step keeps at most one entry per branch instead of recompiling on every draw."""
    import random

    from kiln._capture.backend_compiled import CpuBackend

    backend = CpuBackend()

    def step(x):
        teacher = random.random() < 0.5
        return x + 1 if teacher else x - 1

    compiled = kiln.compile(step, backend=backend)
    random.seed(0)
    want = [random.random() < 0.5 for _ in range(12)]
    random.seed(0)
    got = [compiled(kiln.zeros(1)).item() > 0 for _ in range(12)]
    assert got == want
    assert len(backend.reports) <= 4  # before the resume, and its first, dynamic, flipped entries


def test_unfreezing_a_parameter_after_compiling_gives_it_a_gradient():
    # fine-tuning: the backbone is frozen for the first calls, then unfrozen; the compiled forward
    # must not keep treating its weight as a constant
    kiln.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.Linear(4, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 2))
    x = kiln.randn(3, 4)
    compiled = kiln.compile(model)
    for p in model[0].parameters():
        p.requires_grad_(False)
    compiled(x).sum().backward()
    assert model[0].weight.grad is None
    for p in model[0].parameters():
        p.requires_grad_(True)
    compiled(x).sum().backward()
    got = model[0].weight.grad.clone()
    model[0].weight.grad = None
    model(x).sum().backward()
    np.testing.assert_allclose(got.numpy(), model[0].weight.grad.numpy(), rtol=1e-6)
    for p in model[0].parameters():  # and frozen again
        p.requires_grad_(False)
        p.grad = None
    compiled(x).sum().backward()
    assert model[0].weight.grad is None


def test_an_epoch_loop_alternating_train_and_eval_captures_each_mode_once():
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.0), nn.Linear(16, 1))
    compiled = kiln.compile(model)
    records: list = []
    compiler_of(compiled).recorder = records
    x = kiln.randn(4, 8)
    for _ in range(10):
        model.train()
        compiled(x).sum().backward()
        model.eval()
        with kiln.no_grad():
            got = compiled(x)
            np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-6)
    assert len(records) == 2  # one capture per mode
    assert not model.training and not model[1].training
    model[1].train()  # one submodule's mode is guarded too
    with kiln.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-5)
    assert len(records) == 3


class OverflowChecked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if h.abs().max() > 1e6:  # a data-dependent branch: a graph break in every layer
            h = h.clamp(-1e6, 1e6)
        return x + h.relu()


def test_the_recompile_limit_counts_per_module_instance():
    # each layer's forward is captured for its own instance (the break guards `self`): twelve
    # layers are twelve captures of one code object, not a recompile storm
    kiln.manual_seed(0)
    model = nn.Sequential(*[OverflowChecked() for _ in range(12)]).eval()
    compiled = kiln.compile(model)
    x = kiln.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a recompile-limit warning fails the test
        with kiln.no_grad():
            for _ in range(3):
                np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-6)
    entries = kiln._C._capture.entries(OverflowChecked.forward.__code__)
    assert len(entries) == 12


def test_iterating_a_tensor_of_constant_length_beside_a_dynamic_argument():
    """A diffusion loop's `for t in timesteps` over a fixed-length tensor unrolls even after
    another argument's batch went symbolic (it once broke on 'symbolic sizes')."""
    def denoise(x, timesteps):
        for t in timesteps:
            x = x * 0.9 + t * 0.01
        return x

    compiled = kiln.compile(denoise, fullgraph=True)  # a break raises
    ts = kiln.tensor([3.0, 2.0, 1.0])
    for batch in (1, 2, 3, 4):
        x = kiln.randn(batch, 4)
        np.testing.assert_allclose(compiled(x, ts).numpy(), denoise(x, ts).numpy(), rtol=1e-6)


class _KeepsState(nn.Module):
    """Per-call attribute stores real model code makes: a dtype and a shape that stay the same
    (Switch's router), and an attention map kept for plotting (ESPnet), which no compiled code
    reads back."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.attn = None

    def forward(self, x):
        self.input_dtype = x.dtype
        self.last_shape = tuple(x.shape)
        self.attn = (x @ x.mT).softmax(-1)
        return self.fc(self.attn @ x).to(self.input_dtype)


def test_attribute_stores_that_change_nothing_read_do_not_recompile():
    kiln.manual_seed(0)
    mod = _KeepsState().eval()
    p = Probe(mod, code=_KeepsState.forward.__code__)
    x = rand(3, 4)
    with kiln.no_grad():
        for _ in range(6):
            out = p(x)
        want = mod(x)
    assert_same(out, want)
    assert_same(mod.attn, (x @ x.mT).softmax(-1))  # the stored map is the caller's to read
    assert mod.last_shape == (3, 4) and mod.input_dtype == kiln.float32
    # one capture, and one more after the first call created the two new attributes
    assert p.captures <= 2, p.reasons


def test_a_stateless_module_built_in_forward_is_inlined():
    """HF heads' `loss_fct = CrossEntropyLoss()` inside forward: no break, no capture per call
    (the fresh object's identity was guarded, so every call captured again)."""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.cls = nn.Linear(8, 5)

        def forward(self, x, labels):
            logits = self.cls(x)
            loss_fct = nn.CrossEntropyLoss(ignore_index=-100)
            return loss_fct(logits.view(-1, 5), labels.view(-1)), nn.Softmax(dim=-1)(logits)

    kiln.manual_seed(0)
    mod = Head()
    p = Probe(mod, code=Head.forward.__code__, fullgraph=True)
    x, y = rand(4, 8), kiln.tensor([0, 4, -100, 2])
    for _ in range(5):
        got = p(x, y)
    for g, w in zip(got, mod(x, y), strict=True):
        assert_same(g, w)
    assert p.captures == 1, p.reasons


def test_math_functions_of_a_run_time_number_stay_in_the_graph():
    """A cosine schedule of a float argument and an EMA decay of a step counter
    (`1 - math.exp(-updates / tau)`, ultralytics' ModelEMA): math.* of a number that changes
    per call is a graph node, not a break, and its value is the call's."""
    import math

    class State:
        updates = 0

    state = State()

    def ema(x):
        state.updates += 1
        return x * (0.9999 * (1 - math.exp(-state.updates / 2000)))

    def cosine(x, t):
        return x * (0.5 * (1 + math.cos(math.pi * t))) + math.sqrt(1 - t)

    x = kiln.ones(3)
    compiled_ema = kiln.compile(ema, fullgraph=True)
    compiled_cos = kiln.compile(cosine, fullgraph=True)
    for i in range(1, 6):
        got = compiled_ema(x)
        want = 0.9999 * (1 - math.exp(-state.updates / 2000))
        np.testing.assert_allclose(got.numpy(), np.full(3, want), rtol=1e-6)
        t = i / 8
        np.testing.assert_allclose(compiled_cos(x, t).numpy(), cosine(x, t).numpy(), rtol=1e-6)


def test_a_list_repeated_by_a_symbolic_size_specializes_instead_of_breaking():
    """YOLO's `z = [t] * bs` after the batch went symbolic: the length is the size now,
    guarded (a new batch size captures again, as torch does)."""
    def f(x):
        parts = [x.sum(0)] * x.shape[0]
        return kiln.stack(parts) + x

    compiled = kiln.compile(f, fullgraph=True)  # a break raises
    for batch in (2, 3, 4):
        x = rand(batch, 5)
        assert_same(compiled(x), f(x))


def test_int_of_a_true_division_of_a_size_stays_symbolic():
    """Swin's window_reverse: `B = int(windows.shape[0] / (H * W / ws / ws))` is a floor
    division of the size (equal for a non-negative size and a positive whole divisor), so the
    batch stays symbolic instead of recapturing static for every batch size."""
    def window_reverse(windows, ws, h, w):
        b = int(windows.shape[0] / (h * w / ws / ws))
        x = windows.view(b, h // ws, w // ws, ws, ws, -1)
        return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)

    p = Probe(lambda x: window_reverse(x * 2, 4, 8, 8))
    for batch in range(1, 7):
        x = rand(batch * 4, 4, 4, 3)
        assert_same(p(x), window_reverse(x * 2, 4, 8, 8))
    assert p.captures <= 2, p.reasons
