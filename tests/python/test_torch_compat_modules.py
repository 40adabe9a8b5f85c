"""torch's small modules that model files and training scripts import: kiln.jit,
kiln.utils.checkpoint, kiln.testing, kiln.random, kiln.nn.attention, kiln.profiler (and
kiln.autograd.profiler), kiln.optim.swa_utils. Numbers are checked against torch (checkpoint
gradients, assert_close messages, weight averages, SWALR's schedule, profiler schedules), and a
forward using them compiles whole: no graph break, no eager node."""

from __future__ import annotations

import copy
import gzip
import json
import os
import typing
import warnings
from typing import Dict, List, Optional  # noqa: UP035 - the spellings TorchScript code uses

import numpy as np
import pytest
import torch
import torch.optim.swa_utils as tswa

import kiln
from kiln._capture.backend_compiled import CpuBackend
from kiln.nn.attention import SDPBackend, sdpa_kernel
from kiln.optim import swa_utils as kswa
from kiln.utils.checkpoint import checkpoint, checkpoint_sequential

nn = kiln.nn


def _k(a) -> kiln.Tensor:
    return kiln.from_numpy(np.array(a, copy=True))


def _t(a) -> torch.Tensor:
    return torch.from_numpy(np.array(a, copy=True))


def _np(t) -> np.ndarray:
    return t.detach().numpy()


# -- kiln.jit ----------------------------------------------------------------------------------
def test_jit_entry_points_leave_code_as_is():
    lin = nn.Linear(2, 2)

    def f(x):
        return x + 1

    assert kiln.jit.is_scripting() is False and kiln.jit.is_tracing() is False
    assert kiln.jit.script(lin) is lin and kiln.jit.script(f) is f
    assert kiln.jit.trace(f, (kiln.ones(2),)) is f
    assert kiln.jit.trace(lin, example_inputs=kiln.ones(1, 2)) is lin
    assert kiln.jit.ignore(f) is f and kiln.jit.ignore(drop=True)(f) is f
    assert kiln.jit.ignore()(f) is f
    assert kiln.jit.unused(f) is f and kiln.jit.export(f) is f and kiln.jit.interface(f) is f
    assert kiln.jit.Final is typing.Final
    assert kiln.jit.annotate(List[int], [3]) == [3]  # noqa: UP006
    fut = kiln.jit.fork(f, kiln.ones(2))
    np.testing.assert_array_equal(_np(kiln.jit.wait(fut)), [2.0, 2.0])
    assert fut.done() and fut.wait() is fut.value()
    assert kiln.jit.wait(fut.then(lambda fu: fu.wait() * 3)).sum().item() == 12.0

    class Scripted(kiln.jit.ScriptModule):
        @kiln.jit.script_method
        def forward(self, x):
            return x * 2

    assert isinstance(Scripted(), nn.Module) and not isinstance(lin, kiln.jit.ScriptModule)
    assert Scripted()(kiln.ones(1)).item() == 2.0


@pytest.mark.parametrize("call", [lambda: kiln.jit.save(nn.Linear(1, 1), "m.pt"),
                                  lambda: kiln.jit.load("m.pt")])
def test_jit_archives_point_to_export(call):
    with pytest.raises(NotImplementedError, match="kiln.export"):
        call()


# -- kiln.utils.checkpoint ---------------------------------------------------------------------
class _Block(nn.Module):
    def __init__(self, dropout=0.3):
        super().__init__()
        self.l1, self.l2, self.drop = nn.Linear(8, 16), nn.Linear(16, 8), nn.Dropout(dropout)

    def forward(self, x):
        return self.l2(self.drop(kiln.tanh(self.l1(x)))) + x


def _grads(block, x0, mode, x_grad=True, preserve=True):
    """Output, input grad and parameter grads of sum(block(x)^2), checkpointed per `mode`
    (None: plain), from the same RNG state."""
    block.zero_grad(set_to_none=True)
    x = x0.clone().requires_grad_(x_grad)
    kiln.manual_seed(123)
    y = block(x) if mode is None else checkpoint(block, x, use_reentrant=mode == "reentrant",
                                                 preserve_rng_state=preserve)
    (y * y).sum().backward()
    after = kiln.rand(4)  # the recomputation must leave the stream where the forward left it
    return [y, x.grad if x_grad else None] + [p.grad for p in block.parameters()] + [after]


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_checkpoint_gradients_equal_plain_ones_with_dropout(mode):
    kiln.manual_seed(0)
    block, x0 = _Block(), kiln.randn(4, 8)
    for got, want in zip(_grads(block, x0, mode), _grads(block, x0, None), strict=True):
        np.testing.assert_array_equal(_np(got), _np(want))


def test_checkpoint_without_rng_state_draws_new_masks():
    kiln.manual_seed(0)
    block, x0 = _Block(0.5), kiln.randn(4, 8)
    got, want = _grads(block, x0, "non_reentrant", preserve=False), _grads(block, x0, None)
    assert not np.array_equal(_np(got[1]), _np(want[1]))


def test_checkpoint_non_reentrant_gives_parameter_grads_when_the_input_needs_none():
    kiln.manual_seed(1)
    block, x0 = _Block(0.0), kiln.randn(4, 8)
    got, want = _grads(block, x0, "non_reentrant", False), _grads(block, x0, None, False)
    for g, w in zip(got[2:], want[2:], strict=True):
        np.testing.assert_array_equal(_np(g), _np(w))


def test_checkpoint_reentrant_without_grad_inputs_warns_like_torch():
    block = _Block(0.0)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        y = checkpoint(block, kiln.randn(2, 8), use_reentrant=True)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        ty = torch.utils.checkpoint.checkpoint(torch.nn.Linear(8, 8), torch.randn(2, 8),
                                               use_reentrant=True)
    assert y.requires_grad is ty.requires_grad is False


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_matches_torch(reentrant):
    kiln.manual_seed(2)
    block = _Block(0.0)
    tblock = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    for tp, kp in zip(tblock.parameters(), block.parameters(), strict=True):
        tp.data = _t(_np(kp))
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    kx, tx = _k(x).requires_grad_(True), _t(x).requires_grad_(True)
    ky = checkpoint(block, kx, use_reentrant=reentrant)
    ty = torch.utils.checkpoint.checkpoint(lambda v: tblock(v) + v, tx, use_reentrant=reentrant)
    (ky * ky).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(_np(ky), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_np(kx.grad), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    for kp, tp in zip(block.parameters(), tblock.parameters(), strict=True):
        np.testing.assert_allclose(_np(kp.grad), tp.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_checkpoint_closures_kwargs_and_nested_outputs():
    w = kiln.randn(3, requires_grad=True)
    a, b = kiln.randn(3, requires_grad=True), kiln.randn(3, requires_grad=True)
    h = w * 2  # a non-leaf read through the closure, and used outside it too

    def fn(x, y=None, scale=1.0):
        return {"out": (x * h * scale, (x + y).sum()), "n": 3}

    got = checkpoint(fn, a, y=b, scale=2.0, use_reentrant=False)
    assert got["n"] == 3
    (got["out"][0].sum() + got["out"][1] + h.sum()).backward()
    grads = [a.grad, b.grad, w.grad]
    for t in (a, b, w):
        t.grad = None
    h = w * 2
    want = fn(a, y=b, scale=2.0)
    (want["out"][0].sum() + want["out"][1] + h.sum()).backward()
    for g, t in zip(grads, (a, b, w), strict=True):
        np.testing.assert_array_equal(_np(g), _np(t.grad))
    with pytest.raises(ValueError, match="Unexpected keyword arguments: y"):
        checkpoint(fn, a, y=b, use_reentrant=True)


def test_checkpoint_autograd_grad_and_the_use_reentrant_warning():
    lin = nn.Linear(5, 3)
    x = kiln.randn(2, 5, requires_grad=True)
    got = kiln.autograd.grad(checkpoint(lin, x, use_reentrant=False).sum(), [x, lin.weight])
    want = kiln.autograd.grad(lin(x).sum(), [x, lin.weight])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(_np(g), _np(w))
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed explicitly"):
        checkpoint(lin, x)
    with pytest.raises(RuntimeError, match="double backward"):
        kiln.autograd.grad(checkpoint(kiln.sin, x, use_reentrant=False).sum(), x,
                           create_graph=True)
    with kiln.no_grad():
        assert not checkpoint(lin, x, use_reentrant=False).requires_grad


def test_checkpoint_recomputation_must_match_the_forward():
    calls = []

    def grows(x):
        calls.append(1)
        return x[:len(calls)] * 2

    x = kiln.randn(4, requires_grad=True)
    with pytest.raises(kiln.utils.checkpoint.CheckpointError, match="different metadata"):
        checkpoint(grows, x, use_reentrant=False).sum().backward()


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_sequential_equals_plain_and_torch(reentrant):
    kiln.manual_seed(3)
    seq = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 2))
    tseq = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6),
                               torch.nn.Tanh(), torch.nn.Linear(6, 2))
    tseq.load_state_dict({k: _t(_np(v)) for k, v in seq.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    kx, tx = _k(x).requires_grad_(True), _t(x).requires_grad_(True)
    checkpoint_sequential(seq, 2, kx, use_reentrant=reentrant).sum().backward()
    torch.utils.checkpoint.checkpoint_sequential(tseq, 2, tx, use_reentrant=reentrant).sum() \
        .backward()
    got = [kx.grad] + [p.grad for p in seq.parameters()]
    seq.zero_grad(set_to_none=True)
    px = _k(x).requires_grad_(True)
    seq(px).sum().backward()
    want = [px.grad] + [p.grad for p in seq.parameters()]
    theirs = [tx.grad] + [p.grad for p in tseq.parameters()]
    for g, w, t in zip(got, want, theirs, strict=True):
        np.testing.assert_array_equal(_np(g), _np(w))
        np.testing.assert_allclose(_np(g), t.numpy(), rtol=1e-5, atol=1e-6)


# -- kiln.testing ------------------------------------------------------------------------------
_CLOSE_CASES = [
    ([1.0, 2.0, 3.0], "float32", [1.0, 2.5, 3.0], "float32", {}),
    ([1.0, 2.0, 3.0], "float64", [1.0, 2.000001, 3.1], "float64", {}),
    ([[1, 2], [3, 4]], "int64", [[1, 2], [3, 5]], "int64", {}),
    ([True, False], "bool", [True, True], "bool", {}),
    (1.5, "float32", 1.25, "float32", {}),
    ([1.0, 2.0], "float32", [1.0, 2.0], "float64", {}),
    ([1.0, 2.0], "float32", [1.0, 2.1], "float64", {"check_dtype": False}),
    ([1.0, 2.0], "float32", [1.0, 2.0, 3.0], "float32", {}),
    ([np.nan, 2.0], "float32", [np.nan, 2.0], "float32", {}),
    ([np.nan, 2.0], "float32", [np.nan, 2.0], "float32", {"equal_nan": True}),
    ([0.0, 2.0], "float32", [1.0, 2.0], "float32", {}),
    ([1.0, 2.0], "float16", [1.001, 2.0], "float16", {}),
    ([1.0, 2.0], "bfloat16", [1.1, 2.0], "bfloat16", {}),
    ([1.0, 2.0], "float32", [1.1, 2.0], "float32", {"rtol": 0.0, "atol": 0.0}),
    ([1.0, 2.0], "float32", [1.1, 2.0], "float32", {"rtol": 0.2, "atol": 0.0}),
    ([1.0, 2.0], "float32", [1.1, 2.0], "float32", {"rtol": 0.2}),
    ([1.0, 2.0], "float32", [1.1, 2.0], "float32", {"msg": "custom"}),
    ([1.0, 2.0], "float32", [1.1, 2.0], "float32", {"msg": lambda m: "X" + m}),
    ([[1.0, 2.0], [3.0, 4.0]], "float32", [[1.0, 2.0], [3.0, 4.001]], "float32", {}),
    ([1, 2], "uint8", [1, 3], "uint8", {}),
]


def _error(fn, *args, **kwargs) -> str | None:
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the type and text are what is compared
        return f"{type(e).__name__}: {e}".replace("torch.", "kiln.")
    return None


@pytest.mark.parametrize("a,adt,e,edt,kw", _CLOSE_CASES)
def test_assert_close_tensors_like_torch(a, adt, e, edt, kw):
    def k(v, dt):
        return _k(v).to(getattr(kiln, dt))

    def t(v, dt):
        return _t(v).to(getattr(torch, dt))

    ours = _error(kiln.testing.assert_close, k(a, adt), k(e, edt), **kw)
    assert ours == _error(torch.testing.assert_close, t(a, adt), t(e, edt), **kw)


@pytest.mark.parametrize("a,e", [
    ((1, 2.0, [3.0]), (1, 2.0, [3.5])), ({"a": 1.0, "b": None}, {"a": 1.0, "b": 2}),
    ({"a": 1}, {"b": 1}), ([1, 2], [1]), (1.0, 1), (True, False), (1, 2), ("x", "x"),
    (1.0, 1.0 + 1e-8), (np.float32(1.0), np.float32(1.5)), (None, None), (None, 1),
    (np.array([1.0, 2.0]), np.array([1.0, 3.0])), (3 + 1j, 3 + 2j),
])
def test_assert_close_python_values_like_torch(a, e):
    assert _error(kiln.testing.assert_close, a, e) == _error(torch.testing.assert_close, a, e)


def test_assert_close_mismatch_counts():
    with pytest.raises(AssertionError) as info:
        kiln.testing.assert_close(kiln.zeros(2, 5), kiln.ones(2, 5) * kiln.arange(10.0).view(2, 5))
    assert str(info.value).startswith("Tensor-likes are not close!\n\nMismatched elements: "
                                      "9 / 10 (90.0%)\nGreatest absolute difference: 9.0 at "
                                      "index (1, 4)")


def test_make_tensor():
    t = kiln.testing.make_tensor(3, 4, dtype=kiln.float32, low=-2, high=5, requires_grad=True)
    assert tuple(t.shape) == (3, 4) and t.requires_grad and t.dtype == kiln.float32
    assert float(t.min()) >= -2 and float(t.max()) < 5
    i = kiln.testing.make_tensor((50,), dtype=kiln.int8, exclude_zero=True)
    assert i.dtype == kiln.int8 and int(i.min()) >= -9 and int(i.max()) <= 9
    assert int((i == 0).sum()) == 0
    b = kiln.testing.make_tensor([2, 3], dtype=kiln.bool, noncontiguous=True)
    assert b.dtype == kiln.bool and tuple(b.shape) == (2, 3) and not b.is_contiguous()
    with pytest.raises(ValueError, match="requires_grad=True"):
        kiln.testing.make_tensor(2, dtype=kiln.int64, requires_grad=True)
    with pytest.raises(ValueError, match="`low` must be less than `high`"):
        kiln.testing.make_tensor(2, dtype=kiln.float32, low=3, high=1)


# -- kiln.random -------------------------------------------------------------------------------
def test_random_seeding_and_fork_rng():
    assert kiln.random.manual_seed(7) is kiln.default_generator
    assert kiln.random.initial_seed() == 7
    a = kiln.rand(3)
    kiln.random.manual_seed(7)
    np.testing.assert_array_equal(_np(kiln.rand(3)), _np(a))
    state = kiln.random.get_rng_state()
    with kiln.random.fork_rng(devices=[]):
        kiln.rand(5)
    b = kiln.rand(3)
    kiln.random.set_rng_state(state)
    np.testing.assert_array_equal(_np(kiln.rand(3)), _np(b))
    with kiln.random.fork_rng(enabled=False):
        kiln.rand(5)
    kiln.random.set_rng_state(state)
    kiln.rand(5)
    c = kiln.rand(3)
    kiln.random.set_rng_state(state)
    with kiln.random.fork_rng(enabled=False):
        kiln.rand(5)
    np.testing.assert_array_equal(_np(kiln.rand(3)), _np(c))
    assert isinstance(kiln.random.seed(), int)


# -- kiln.nn.attention -------------------------------------------------------------------------
def test_sdpa_kernel_selects_nothing_that_changes_results():
    from torch.nn.attention import SDPBackend as TB

    assert {m.name: int(m) for m in SDPBackend} == {n: int(v) for n, v in TB.__members__.items()}
    from kiln.nn import attention

    q = kiln.randn(1, 2, 4, 8)
    plain = kiln.nn.functional.scaled_dot_product_attention(q, q, q)
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.MATH]) as ctx:
        assert ctx == {} and attention._cur_sdpa_kernel_backends() == [SDPBackend.MATH]
        chosen = kiln.nn.functional.scaled_dot_product_attention(q, q, q)
    assert SDPBackend.FLASH_ATTENTION in attention._cur_sdpa_kernel_backends()
    np.testing.assert_array_equal(_np(chosen), _np(plain))
    with pytest.raises(AssertionError, match="Backend must be an instance of SDPBackend"):
        sdpa_kernel("math")
    assert kiln.nn.attention is attention and kiln.nn.MultiheadAttention is not None


# -- kiln.profiler -----------------------------------------------------------------------------
def test_profiler_schedule_matches_torch():
    for kw in [dict(wait=1, warmup=1, active=2, repeat=2), dict(wait=0, warmup=2, active=1),
               dict(wait=2, warmup=1, active=3, skip_first=3, repeat=1)]:
        ours, theirs = kiln.profiler.schedule(**kw), torch.profiler.schedule(**kw)
        assert [ours(i).name for i in range(20)] == [theirs(i).name for i in range(20)]


def _cycles(mod, **kw):
    calls = []

    def ready(p):
        calls.append((p.step_num, sorted(e.key for e in p.key_averages() if "blk" in e.key)))

    with mod.profile(schedule=mod.schedule(**kw), on_trace_ready=ready) as p:
        for i in range(10):
            with mod.record_function(f"blk{i}"):
                pass
            p.step()
    return calls


@pytest.mark.parametrize("kw", [dict(wait=1, warmup=1, active=2, repeat=2),
                                dict(wait=0, warmup=1, active=1),
                                dict(wait=2, warmup=1, active=3, skip_first=1)])
def test_profiler_trace_ready_cycles_match_torch(kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _cycles(kiln.profiler, **kw) == _cycles(torch.profiler, **kw)


def test_profiler_table_and_chrome_trace(tmp_path):
    @kiln.profiler.record_function("decorated")
    def work():
        return sum(range(1000))

    with kiln.profiler.profile(activities=[kiln.profiler.ProfilerActivity.CPU]) as prof:
        with kiln.profiler.record_function("outer"):
            with kiln.profiler.record_function("inner"):
                work()
        work()
    averages = {e.key: e for e in prof.key_averages()}
    assert {k: e.count for k, e in averages.items()} == {"outer": 1, "inner": 1, "decorated": 2}
    outer = averages["outer"]
    assert outer.self_cpu_time_total <= outer.cpu_time_total
    assert outer.cpu_time_total >= averages["inner"].cpu_time_total
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=10)
    assert "outer" in table and "# of Calls" in table and "Self CPU time total" in table
    path = prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = json.loads(open(path).read())["traceEvents"]
    assert sorted(e["name"] for e in events) == ["decorated", "decorated", "inner", "outer"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    prof.export_chrome_trace(str(tmp_path / "trace.json.gz"))
    assert json.loads(gzip.decompress((tmp_path / "trace.json.gz").read_bytes()))["traceEvents"]
    assert sorted(os.listdir(tmp_path)) == ["trace.json", "trace.json.gz"]  # no temp files
    assert kiln.profiler.tensorboard_trace_handler(str(tmp_path))(prof) is None


def test_autograd_profiler():
    with kiln.autograd.profiler.profile() as prof:
        with kiln.autograd.profiler.record_function("z"):
            pass
    assert [e.key for e in prof.key_averages()] == ["z"] and "z" in prof.table()
    with kiln.autograd.profiler.profile(enabled=False) as off:
        with kiln.profiler.record_function("z"):
            pass
    assert list(off.key_averages()) == []


# -- kiln.optim.swa_utils ----------------------------------------------------------------------
def _pair():
    tm = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                             torch.nn.Linear(6, 2))
    km = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    km.load_state_dict({k: _k(v.numpy()) for k, v in tm.state_dict().items()})
    return tm, km


def _perturb(tm, km, seed):
    rng = np.random.default_rng(seed)
    with torch.no_grad(), kiln.no_grad():
        for tp, kp in zip(list(tm.parameters()) + list(tm.buffers()),
                          list(km.parameters()) + list(km.buffers()), strict=True):
            if not tp.dtype.is_floating_point:
                tp.add_(1)
                kp.add_(1)
                continue
            d = rng.standard_normal(tuple(tp.shape)).astype(np.float32)
            tp.add_(_t(d))
            kp.add_(_k(d))


@pytest.mark.parametrize("name", ["swa", "swa_buffers", "ema_multi", "ema_multi_buffers",
                                  "ema", "swa_multi", "swa_fn"])
def test_averaged_model_equals_torch(name):
    fns = {"ema_multi": "get_ema_multi_avg_fn", "ema": "get_ema_avg_fn",
           "swa_multi": "get_swa_multi_avg_fn", "swa_fn": "get_swa_avg_fn"}

    def options(mod):
        kw = {"use_buffers": name.endswith("buffers")}
        key = name.removesuffix("_buffers")
        if key in fns:
            args = (0.8,) if key.startswith("ema") else ()
            fn = getattr(mod, fns[key])(*args)
            kw["multi_avg_fn" if "multi" in key else "avg_fn"] = fn
        return kw

    tm, km = _pair()
    ta, ka = tswa.AveragedModel(tm, **options(tswa)), kswa.AveragedModel(km, **options(kswa))
    for step in range(4):
        _perturb(tm, km, step)
        ta.update_parameters(tm)
        ka.update_parameters(km)
        sd_t, sd_k = ta.state_dict(), ka.state_dict()
        assert list(sd_t) == list(sd_k)
        for key in sd_t:
            np.testing.assert_array_equal(_np(sd_k[key]), sd_t[key].numpy(), err_msg=key)
    x = np.ones((3, 4), np.float32)
    ta.eval(), ka.eval()
    np.testing.assert_allclose(_np(ka(_k(x))), ta(_t(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_update_bn_equals_torch():
    tm, km = _pair()
    data = [np.random.default_rng(i).standard_normal((8, 4)).astype(np.float32) for i in range(4)]
    km.eval()
    tm.eval()
    tswa.update_bn([(_t(d), 0) for d in data], tm)
    kswa.update_bn([(_k(d), 0) for d in data], km)
    assert not km.training
    for (key, theirs), ours in zip(tm.state_dict().items(), km.state_dict().values(),
                                   strict=True):
        np.testing.assert_allclose(_np(ours), theirs.numpy(), rtol=1e-6, atol=1e-7,
                                   err_msg=key)
    assert km[1].momentum == 0.1
    kswa.update_bn([], nn.Linear(2, 2))  # no BatchNorm: nothing to do


@pytest.mark.parametrize("strategy,epochs", [("cos", 3), ("linear", 5), ("cos", 0)])
def test_swalr_equals_torch(strategy, epochs):
    tm, km = _pair()
    topt = torch.optim.SGD(tm.parameters(), lr=0.5)
    kopt = kiln.optim.SGD(km.parameters(), lr=0.5)
    tsch = tswa.SWALR(topt, swa_lr=0.05, anneal_epochs=epochs, anneal_strategy=strategy)
    ksch = kswa.SWALR(kopt, swa_lr=0.05, anneal_epochs=epochs, anneal_strategy=strategy)
    assert isinstance(ksch, kiln.optim.lr_scheduler.LRScheduler)
    for _ in range(8):
        topt.step()
        kopt.step()
        tsch.step()
        ksch.step()
        assert ksch.get_last_lr() == tsch.get_last_lr()
        assert kopt.param_groups[0]["lr"] == topt.param_groups[0]["lr"]
    assert sorted(ksch.state_dict()) == sorted(tsch.state_dict())
    restored = kswa.SWALR(kiln.optim.SGD(km.parameters(), lr=0.5), swa_lr=0.05)
    restored.load_state_dict(ksch.state_dict())
    assert restored.anneal_func is (kswa.SWALR._cosine_anneal if strategy == "cos"
                                    else kswa.SWALR._linear_anneal)
    with pytest.raises(ValueError, match="anneal_strategy"):
        kswa.SWALR(kopt, swa_lr=0.1, anneal_strategy="step")


# -- kiln.compile ------------------------------------------------------------------------------
@kiln.profiler.record_function("scaled")
@sdpa_kernel(SDPBackend.MATH)
def _scaled(x):
    return x * 0.5


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _Block(0.0)
        self.head = nn.Linear(8, 4)
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))

    def forward(self, x):
        if not kiln.jit.is_scripting():
            x = x * 2
        if kiln.jit.is_tracing():
            x = x + 100
        extras = kiln.jit.annotate(List[kiln.Tensor], [])  # noqa: UP006
        table = kiln.jit.annotate(Dict[str, Optional[kiln.Tensor]], {})  # noqa: UP006,UP045
        with kiln.profiler.record_function("block"):
            x = kiln.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)
        with kiln.autograd.profiler.record_function("seq"):
            x = x + checkpoint_sequential(self.seq, 2, x, use_reentrant=False)
        extras.append(kiln.jit.wait(kiln.jit.fork(self.head, x)))
        with sdpa_kernel(SDPBackend.MATH):
            out = _scaled(extras[0]) + 1
        return out if len(table) == 0 else out * 0


def test_forward_using_the_modules_compiles_whole():
    kiln.manual_seed(4)
    model, x = _Model(), kiln.randn(3, 8)
    explained = kiln.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(copy.deepcopy(model), backend=backend)
    np.testing.assert_allclose(_np(compiled(x)), _np(model(x)), rtol=1e-6, atol=1e-6)
    assert len(backend.reports) == 1 and backend.reports[0].eager_nodes == 0
    with kiln.profiler.profile() as prof:  # compiled code records no ranges
        compiled(x)
    assert list(prof.key_averages()) == []


def test_compiled_training_gradients_equal_eager():
    kiln.manual_seed(5)
    model, x = _Model(), kiln.randn(3, 8)
    twin = copy.deepcopy(model)
    compiled = kiln.compile(twin)
    (model(x) ** 2).sum().backward()
    (compiled(x) ** 2).sum().backward()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        np.testing.assert_allclose(_np(q.grad), _np(p.grad), rtol=1e-5, atol=1e-6)


def test_tensor_split_takes_torchs_keyword_and_variable_is_the_tensor():
    """`x.split(split_size=[d, d], dim=-1)` (mamba-minimal) and older code's
    `from torch.autograd import Variable`, eager and compiled."""
    import numpy as np

    import kiln
    from kiln.autograd import Variable

    x = kiln.arange(10.0)
    assert [p.shape[0] for p in x.split(split_size=[4, 6], dim=-1)] == [4, 6]
    assert [p.shape[0] for p in kiln.split(x, split_size_or_sections=5)] == [5, 5]
    compiled = kiln.compile(lambda x: x.split(split_size=[4, 6], dim=-1)[1] * 2)
    np.testing.assert_array_equal(compiled(x).numpy(), np.arange(4.0, 10.0) * 2)
    v = Variable(kiln.ones(2), requires_grad=True)
    assert v.requires_grad and isinstance(v, Variable) and not isinstance(3, Variable)
