"""Changes to lists and dicts the caller can see, made by compiled code: an argument list written
item by item (YOLO's Detect head), results appended to a list passed in, a cache kept in a
module attribute. The capture goes on through them and the entry writes the final contents into
the real objects after the graph runs, so the caller sees what eager leaves."""

from __future__ import annotations

import pytest
from corpus_util import (  # noqa: F401 - fresh_capture: autouse fixture
    assert_breaks,
    assert_same,
    compiler_of,
    fresh_capture,
    run_case,
)

import kiln
import kiln.nn as nn
from kiln._capture.backend_compiled import CpuBackend


def rand(*shape, seed=0):
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


def append_to_arg(x, out):
    y = x + 1
    out.append(y)
    return y * 2


def test_appending_to_a_list_argument_is_one_graph():
    info = run_case(append_to_arg, rand(3), [], expect_graphs=1, expect_breaks=0)
    assert info.op_counts == [2]


def test_the_caller_sees_every_append():
    out = []
    compiled = kiln.compile(append_to_arg)
    x = rand(3)
    compiled(x, out)
    compiled(x * 2, out)
    assert len(out) == 2
    assert_same(out[0], x + 1)
    assert_same(out[1], x * 2 + 1)


def dict_changes(x, d):
    d["y"] = x * 2
    d["z"] = d.pop("a") + x
    d.update(w=x - 1)
    del d["y"]
    d.setdefault("v", x)
    return x + 1


def test_dict_argument_changes_are_replayed_in_order():
    info = run_case(dict_changes, rand(3), {"a": rand(3, seed=1), "b": 7},
                    expect_graphs=1, expect_breaks=0)
    assert info.op_counts == [3]  # `d["y"]` is deleted again: its product is never computed


def list_edits(x, lst):
    lst[0] = lst[0] * x
    lst += [x]
    lst.insert(1, x + 1)
    lst.extend([x, x])
    del lst[-1]
    last = lst.pop()
    lst.reverse()
    return last.sum()


def test_list_argument_edits_match_eager():
    run_case(list_edits, rand(3), [rand(3, seed=1), rand(3, seed=2)],
             expect_graphs=1, expect_breaks=0)


def nested(x, batch):
    batch["feats"].append(x.relu())
    batch["feats"][0] = batch["feats"][0] + 1
    return x


def test_a_list_inside_a_dict_argument():
    run_case(nested, rand(4), {"feats": [rand(4, seed=3)]}, expect_graphs=1, expect_breaks=0)


def test_the_same_list_through_two_arguments_is_one_list():
    def twice(x, a, b):
        a.append(x)
        return len(b) * x

    lst = []
    compiled = kiln.compile(twice, backend=CpuBackend(fallback=False))
    assert_same(compiled(rand(2), lst, lst), rand(2))  # `b` sees the append through `a`
    assert len(lst) == 1
    a, b = [], []
    assert_same(compiled(rand(2), a, b), rand(2) * 0)  # aliasing guarded: captured again
    assert (len(a), len(b)) == (1, 0)


def test_changes_before_a_graph_break_are_seen_after_it():
    def fn(x, out):
        out.append(x * 3)
        print("", end="")  # a call that breaks the graph
        out.append(out[0] + 1)
        return len(out)

    out = []
    assert kiln.compile(fn)(rand(2), out) == 2
    assert_same(out[0], rand(2) * 3)
    assert_same(out[1], rand(2) * 3 + 1)


def test_a_change_rolled_back_with_a_failed_inline_is_not_replayed():
    def helper(lst, x):
        lst.append(x)
        print("", end="")  # breaks inside the inlined call: the call runs eagerly, once
        return x

    def fn(x, lst):
        return helper(lst, x + 1) * 2

    lst = []
    got = kiln.compile(fn)(rand(2), lst)
    assert len(lst) == 1  # not twice: the capture's append was undone with the inline
    assert_same(got, (rand(2) + 1) * 2)


class DetectHead(nn.Module):
    """YOLOv5's Detect pattern: the input list is written item by item, and a grid cache kept
    in a module attribute is rebuilt when the feature map's shape changes."""

    def __init__(self):
        super().__init__()
        self.m = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.grid = [kiln.empty(0) for _ in range(2)]

    def forward(self, x):
        for i in range(2):
            x[i] = self.m[i](x[i])
            if self.grid[i].shape != x[i].shape:
                self.grid[i] = kiln.arange(x[i].numel()).reshape(x[i].shape).float()
        return kiln.cat([x[0] + self.grid[0], x[1] - self.grid[1]], 1)


def test_a_yolo_head_compiles_whole_and_its_caches_match_eager():
    eager = DetectHead()
    mod = DetectHead()
    mod.load_state_dict(eager.state_dict())
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(mod, backend=backend)
    records: list = []
    compiler_of(compiled).recorder = records
    for step in range(4):
        inputs = [rand(2, 4, seed=step), rand(2, 4, seed=10 + step)]
        theirs = [t.clone() for t in inputs]
        assert_same(compiled(inputs), eager(theirs))
        assert_same(inputs, theirs)  # the list argument, written in place
        assert_same(mod.grid, eager.grid)
    # the first call fills the grids (a module change: captured again once), then it is stable
    assert [r.break_record for r in records] == [None, None]
    assert [r.eager_nodes for r in backend.reports] == [0, 0]


class History(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append(x.sum())
        return x * 2


def test_a_module_list_that_grows_every_call_stops_recapturing():
    eager, mod = History(), History()
    compiled = kiln.compile(mod)
    records: list = []
    compiler_of(compiled).recorder = records
    for step in range(6):
        x = rand(3, seed=step)
        assert_same(compiled(x), eager(x))
    assert len(mod.seen) == 6
    assert_same(mod.seen, eager.seen)
    # three captures replay the append (each bumps the module), the fourth breaks there instead
    assert len(records) <= 5
    assert any(r.break_record and "changes on every call" in r.break_record.reason
               for r in records)


def test_a_list_in_a_closure_is_replayed():
    seen = []

    def fn(x):
        seen.append(x * 2)
        return x + 1

    run_case(fn, rand(2), expect_graphs=1, expect_breaks=0, calls=1)
    assert len(seen) == 2  # run_case's eager call, then the compiled one
    assert_same(seen[1], seen[0])


class Config:
    def __init__(self):
        self.history = []


class Logged(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Config()

    def forward(self, x):
        self.cfg.history.append(x.sum())
        return x * 2


def test_a_list_the_entry_cannot_reach_breaks_with_the_reason():
    mod = Logged()
    info = run_case(mod, rand(2), expect_breaks=1, calls=1)
    assert_breaks(info, "list.append on a list from outside the graph")
    assert len(mod.cfg.history) == 2


class LazyMask(nn.Module):
    """A causal mask made on first use and kept in an attribute, as many attention layers do."""

    def __init__(self):
        super().__init__()
        self.mask = None
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        if self.mask is None or self.mask.shape[0] != x.shape[1]:
            self.mask = kiln.ones(x.shape[1], x.shape[1]).triu(1).bool()
        scores = x @ x.transpose(1, 2)
        return self.proj(scores.masked_fill(self.mask, 0.0) @ x)


def test_an_attribute_set_once_is_replayed_and_then_stable():
    eager, mod = LazyMask(), LazyMask()
    mod.load_state_dict(eager.state_dict())
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(mod, backend=backend)
    records: list = []
    compiler_of(compiled).recorder = records
    for step in range(4):
        x = rand(2, 5, 6, seed=step)
        assert_same(compiled(x), eager(x))
        assert_same(mod.mask, eager.mask)
    assert [r.break_record for r in records] == [None, None]
    assert [r.eager_nodes for r in backend.reports] == [0, 0]


class Buffered(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", kiln.zeros(3))
        self.weight = nn.Parameter(kiln.ones(3))

    def forward(self, x, replace_weight=False):
        self.state = self.state + x  # a buffer: setattr keeps it registered
        if replace_weight:
            self.weight = x
        return self.state * 2


def test_assigning_a_buffer_keeps_it_registered():
    eager, mod = Buffered(), Buffered()
    compiled = kiln.compile(mod)
    x = rand(3)
    assert_same(compiled(x), eager(x))
    assert "state" in mod._buffers
    assert_same(mod.state, eager.state)


def test_replacing_a_parameter_breaks_and_raises_like_eager():
    compiled = kiln.compile(Buffered())
    records: list = []
    compiler_of(compiled).recorder = records
    with pytest.raises(TypeError, match="as parameter 'weight'"):
        Buffered()(rand(3), True)
    with pytest.raises(TypeError, match="as parameter 'weight'"):
        compiled(rand(3), True)
    assert "it replaces a parameter" in records[0].break_record.reason


class CachedAttention(nn.Module):
    """Meta LLaMA's cache idiom: `self.cache_k = self.cache_k.to(q)` (the same tensor), then
    writes into it at the decode position."""

    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(16, 16, bias=False)
        self.cache_k = kiln.zeros(1, 32, 16)

    def forward(self, x, start_pos: int):
        q = self.wq(x)
        self.cache_k = self.cache_k.to(q)
        self.cache_k[:, start_pos:start_pos + x.shape[1]] = q
        k = self.cache_k[:, :start_pos + x.shape[1]]
        return x + (q @ k.transpose(1, 2)).softmax(-1) @ k


def test_assigning_an_attribute_its_own_tensor_changes_nothing():
    layers = [CachedAttention() for _ in range(3)]
    refs = [CachedAttention() for _ in range(3)]
    for a, b in zip(layers, refs, strict=True):
        b.load_state_dict(a.state_dict())
    model, ref = nn.Sequential(*layers).eval(), nn.Sequential(*refs).eval()

    def run(m, x, pos):
        for layer in m:
            x = layer(x, pos)
        return x

    compiled = kiln.compile(run)
    records: list = []
    compiler_of(compiled).recorder = records
    with kiln.no_grad():
        x = rand(1, 4, 16)
        assert_same(compiled(model, x, 0), run(ref, x, 0))
        for pos in range(4, 10):
            x = rand(1, 1, 16, seed=pos)
            assert_same(compiled(model, x, pos), run(ref, x, pos), atol=1e-5)
    for a, b in zip(layers, refs, strict=True):
        assert_same(a.cache_k, b.cache_k, atol=1e-5)
    assert [r.break_record for r in records] == [None] * len(records)
    assert len(records) <= 3  # prefill, the first decode step, then a dynamic position


class DynamicCache:
    """HF's DynamicCache pattern: a plain object passed in, its lists appended to and an int
    attribute advanced by the compiled step."""

    def __init__(self):
        self.key_cache, self._seen_tokens = [], 0

    def update(self, key_states, layer_idx):
        if layer_idx == 0:
            self._seen_tokens += key_states.shape[-2]
        if len(self.key_cache) <= layer_idx:
            self.key_cache.append(key_states)
        else:
            self.key_cache[layer_idx] = kiln.cat([self.key_cache[layer_idx], key_states], -2)
        return self.key_cache[layer_idx]


def decode_step(x, cache):
    for i in range(2):
        x = x + cache.update(x, i).sum(-2, keepdim=True) * 0.1
    return x


def test_a_cache_object_passed_in_is_updated_as_eager_updates_it():
    compiled = kiln.compile(decode_step)
    records: list = []
    compiler_of(compiled).recorder = records
    mine, ref = DynamicCache(), DynamicCache()
    x = rand(1, 3, 4)
    for step in range(6):
        assert_same(compiled(x, mine), decode_step(x, ref), atol=1e-5)
        assert mine._seen_tokens == ref._seen_tokens == 3 * (step + 1)
        assert_same(mine.key_cache, ref.key_cache, atol=1e-5)
        x = rand(1, 3, 4, seed=step + 1)
    assert [r.break_record for r in records] == [None] * len(records)
    assert len(records) <= 4  # the first call, the cache filled, then lengths go symbolic


class Slotted:
    __slots__ = ("count",)

    def __init__(self):
        self.count = 0


def test_an_object_whose_class_owns_the_attribute_still_breaks():
    def fn(x, obj):
        obj.count = 5
        return x + 1

    info = run_case(fn, rand(2), Slotted(), expect_breaks=1, calls=1, check_cached=False)
    assert_breaks(info, "a property or slot of its class")


class KeyedAttention(nn.Module):
    """OpenAI Whisper's attention: keys and values cached in a dict keyed by the projection
    modules, filled by forward hooks that concatenate each step's projections."""

    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x, xa=None, kv_cache=None):
        q = self.query(x)
        if kv_cache is None or xa is None or self.key not in kv_cache:
            k = self.key(x if xa is None else xa)
            v = self.value(x if xa is None else xa)
        else:
            k, v = kv_cache[self.key], kv_cache[self.value]
        return (q @ k.transpose(-1, -2)).softmax(-1) @ v


class KeyedDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.cross = KeyedAttention(), KeyedAttention()

    def forward(self, x, xa, kv_cache=None):
        x = x + self.attn(x, kv_cache=kv_cache)
        return x + self.cross(x, xa, kv_cache=kv_cache)


def install_kv_cache_hooks(model):
    cache = {}

    def save_to_cache(module, _, output):
        if module not in cache or output.shape[1] > 64:
            cache[module] = output
        else:
            cache[module] = kiln.cat([cache[module], output], dim=1).detach()
        return cache[module]

    for m in model.modules():
        if isinstance(m, KeyedAttention):
            m.key.register_forward_hook(save_to_cache)
            m.value.register_forward_hook(save_to_cache)
    return cache


def test_a_cache_keyed_by_modules_and_filled_by_hooks_compiles():
    # a dict keyed by modules made the whole decoder run eagerly
    ref = KeyedDecoder()
    mod = KeyedDecoder()
    mod.load_state_dict(ref.state_dict())
    ref_cache, cache = install_kv_cache_hooks(ref), install_kv_cache_hooks(mod)
    compiled = kiln.compile(mod)
    records: list = []
    compiler_of(compiled).recorder = records
    xa, x = rand(1, 5, 8), rand(1, 3, 8, seed=1)
    with kiln.no_grad():
        for step in range(5):
            assert_same(compiled(x, xa, kv_cache=cache), ref(x, xa, kv_cache=ref_cache),
                        atol=1e-6)
            assert [tuple(v.shape) for v in cache.values()] == [
                tuple(v.shape) for v in ref_cache.values()]
            x = rand(1, 1, 8, seed=step + 2)
    assert all(k is r for k, r in zip(cache, [mod.attn.key, mod.attn.value, mod.cross.key,
                                               mod.cross.value], strict=True))
    assert [r.break_record for r in records] == [None] * len(records)
    assert len(records) <= 4


class MaskedBlock(nn.Module):
    """OpenAI CLIP's ResidualAttentionBlock: the mask is moved to the input's dtype and device
    on every call (the same tensor, or None again)."""

    def __init__(self, mask):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.attn_mask = mask

    def forward(self, x):
        self.attn_mask = self.attn_mask.to(dtype=x.dtype, device=x.device) if (
            self.attn_mask is not None) else None
        return self.lin(x) + (self.attn_mask if self.attn_mask is not None else 0)


def test_storing_what_an_attribute_holds_already_captures_once():
    model = nn.Sequential(MaskedBlock(kiln.zeros(16)), MaskedBlock(None)).eval()
    compiled = kiln.compile(model)
    records: list = []
    compiler_of(compiled).recorder = records
    x = rand(4, 16)
    with kiln.no_grad():
        for _ in range(6):
            assert_same(compiled(x), model(x))
    assert len(records) == 1 and records[0].break_record is None


ACTIVATIONS: dict = {}


def _save_into_global(name):
    def hook(module, inputs, output):
        ACTIVATIONS[name] = output.detach()

    return hook


def test_forward_hooks_filling_a_global_dict_compile_whole():
    """The common feature-extraction idiom: hooks defined in the user's module write into its
    global dict while kiln's Module.__call__ runs them; the dict is reached through the hook's
    own globals, re-read on every call (a dict rebound between calls gets the next writes)."""
    global ACTIVATIONS
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    for name, sub in model.named_children():
        sub.register_forward_hook(_save_into_global(name))
    x = rand(3, 4)
    info = kiln.explain(model)(x)
    assert info.graph_count == 1 and info.graph_break_count == 0
    assert info.fallbacks == [[]]  # compiled whole: no node on an eager kernel
    compiled = kiln.compile(model)
    ACTIVATIONS = {}
    out = compiled(x)
    assert sorted(ACTIVATIONS) == ["0", "1", "2"]
    assert_same(ACTIVATIONS["2"], out.detach())
    with kiln.no_grad():
        assert_same(ACTIVATIONS["1"], model[1](model[0](x)))


def test_forward_hooks_filling_a_closure_dict_compile_whole():
    def build():
        feats = {}

        def grab(name):
            def hook(module, inputs, output):
                feats[name] = output * 2

            return hook

        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
        for name, sub in model.named_children():
            sub.register_forward_hook(grab(name))
        return model, feats

    model, feats = build()
    x = rand(3, 4)
    info = kiln.explain(model)(x)
    assert info.graph_count == 1 and info.graph_break_count == 0
    assert info.fallbacks == [[]]  # compiled whole: no node on an eager kernel
    compiled = kiln.compile(model)
    for k in range(2):
        feats.clear()
        out = compiled(x + k)
        assert sorted(feats) == ["0", "1"]
        assert_same(feats["1"].detach(), (out * 2).detach())
