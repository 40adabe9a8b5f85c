"""Ints computed at run time (a KV cache's length once its size is symbolic) passed to ops that
take an int: the compiled code must use each call's value, never the example's. arange with a
run-time start and triu/tril with a run-time diagonal compile; ops whose int argument must be
a constant for the compiler (pad amounts, roll shifts) run that node eagerly, correctly."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

CASES = {
    "arange_from_past": (lambda pk: kiln.arange(pk.shape[2], pk.shape[2] + 3), 0),
    "arange_step": (lambda pk: kiln.arange(pk.shape[2], 20, 3), 0),
    "arange_float_dtype": (lambda pk: kiln.arange(pk.shape[2], pk.shape[2] + 2,
                                                  dtype=kiln.float32) * 0.5, 0),
    "causal_mask_triu": (lambda pk: kiln.full((2, 2 + pk.shape[2]), float("-inf"))
                         .triu(pk.shape[2] + 1), 0),
    "tril_bool": (lambda pk: kiln.ones(3, 3 + pk.shape[2], dtype=kiln.bool).tril(pk.shape[2]),
                  0),
    "tril_int": (lambda pk: kiln.ones(3, 4, dtype=kiln.int64).tril(-pk.shape[2]), 0),
    "pad_by_past": (lambda pk: F.pad(kiln.ones(2), (pk.shape[2], 0)), None),
    "roll_by_past": (lambda pk: kiln.arange(6).roll(pk.shape[2]), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_time_int_argument_follows_each_call(name):
    fn, eager_nodes = CASES[name]
    backend = CpuBackend(fallback=eager_nodes is None)  # strict where it must compile whole
    compiled = kiln.compile(fn, backend=backend)
    for past in range(1, 7):  # the cache's length goes symbolic at the second size
        pk = kiln.zeros(1, 2, past, 4)
        want, got = fn(pk), compiled(pk)
        assert got.dtype == want.dtype and got.shape == want.shape, past
        assert kiln.equal(got, want), f"past={past}: {got.tolist()} != {want.tolist()}"
    assert len(backend.reports) == 2  # static first, then one symbolic graph for every length
    if eager_nodes is not None:
        assert backend.reports[-1].eager_nodes == eager_nodes


def test_hf_position_ids_in_a_decode_loop():
    # GPT-2 / LLaMA: position_ids = arange(past_length, past_length + seq_len)
    emb = kiln.nn.Embedding(32, 8)

    def step(x, past_k):
        past = past_k.shape[2]
        pos = kiln.arange(past, past + x.shape[1]).unsqueeze(0)
        return emb(pos) + x

    compiled = kiln.compile(step)
    for past in range(1, 8):
        x, pk = kiln.randn(1, 1, 8), kiln.zeros(1, 2, past, 4)
        assert kiln.allclose(compiled(x, pk), step(x, pk))


def test_a_dynamic_int_argument_is_a_symbol_of_the_compiled_code():
    # Meta LLaMA's forward(tokens, start_pos): once start_pos goes dynamic, the compiled part
    # must take each call's value, not refuse every value but its example's and run eagerly
    from kiln._capture import backend_compiled

    reports = []

    def compile_graph(graph, **kw):
        fn = original(graph, **kw)
        reports.append(fn.kiln_report)
        return fn

    original = backend_compiled.compile_graph
    backend_compiled.compile_graph = compile_graph
    try:
        cache, ref_cache = kiln.zeros(1, 16, 8), kiln.zeros(1, 16, 8)

        def step(x, start_pos: int, cache):
            cache[:, start_pos:start_pos + x.shape[1]] = x
            keys = cache[:, :start_pos + x.shape[1]]
            return (x @ keys.transpose(1, 2)).softmax(-1) * start_pos

        compiled = kiln.compile(step)
        for pos in range(3, 10):
            x = kiln.randn(1, 1, 8)
            assert kiln.allclose(compiled(x, pos, cache), step(x, pos, ref_cache))
            assert kiln.equal(cache, ref_cache)
    finally:
        backend_compiled.compile_graph = original
    assert len(reports) == 2
    assert [r.eager_nodes for r in reports] == [0, 0]
    assert sum(r.eager_calls for r in reports) == 0


class CachedGQA(kiln.nn.Module):
    """Meta LLaMA's attention: a cache written at `start_pos`, read up to it, and grouped kv
    heads repeated with expand to the read length (a size computed from the int argument)."""

    def __init__(self):
        super().__init__()
        self.wq, self.wk = kiln.nn.Linear(8, 8, bias=False), kiln.nn.Linear(8, 4, bias=False)
        self.cache_k = kiln.zeros(1, 16, 1, 4)

    def forward(self, x, start_pos: int):
        bsz, seqlen, _ = x.shape
        q = self.wq(x).view(bsz, seqlen, 2, 4)
        k = self.wk(x).view(bsz, seqlen, 1, 4)
        self.cache_k[:bsz, start_pos:start_pos + seqlen] = k
        keys = self.cache_k[:bsz, :start_pos + seqlen]
        bs, slen, n_kv, hd = keys.shape
        keys = keys[:, :, :, None, :].expand(bs, slen, n_kv, 2, hd).reshape(bs, slen, 2, hd)
        return (q.transpose(1, 2) @ keys.transpose(1, 2).transpose(2, 3)).softmax(-1)


def test_sizes_computed_from_a_dynamic_int_argument_stay_symbolic():
    # the int argument's symbol was unknown to the capture, which typed `slen` as the second
    # decode step's value: the expand was compiled for it and later steps were silently wrong
    kiln.manual_seed(0)
    mod, ref = CachedGQA(), CachedGQA()
    ref.load_state_dict(mod.state_dict())
    compiled = kiln.compile(mod)
    steps = [(kiln.randn(1, 5, 8), 0)] + [(kiln.randn(1, 1, 8), p) for p in range(5, 10)]
    with kiln.no_grad():
        for x, pos in steps:
            assert kiln.allclose(compiled(x, pos), ref(x, pos), atol=1e-6), pos
    assert kiln.equal(mod.cache_k, ref.cache_k)


def scatter_mean(x, batch):
    n = int(batch.max().item() + 1)  # PyG's global_mean_pool: a graph break, then a size
    size = list(x.size())
    size[0] = n
    cnt = x.new_zeros(n).scatter_add_(0, batch, x.new_ones(x.size(0)))
    out = x.new_zeros(size).scatter_add_(0, batch.view(-1, 1).expand_as(x), x)
    return out / cnt.clamp(min=1).view(-1, 1).expand(out.size())


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_an_int_read_with_item_sizes_what_follows_the_break(train):
    # the int reaches the resumed code through the break's saved state: as a symbol there,
    # sizes made from it follow every call (they were baked, and the third call crashed)
    compiled = kiln.compile(scatter_mean)
    for graphs in (2, 3, 5, 4):
        batch = kiln.arange(graphs).repeat_interleave(4)
        x = kiln.randn(batch.numel(), 16, requires_grad=train)
        x_ref = x.detach().clone().requires_grad_(train)
        got, want = compiled(x, batch), scatter_mean(x_ref, batch)
        assert got.shape == want.shape and kiln.allclose(got, want, atol=1e-6)
        if train:
            (got * kiln.arange(16.0)).sum().backward()
            (want * kiln.arange(16.0)).sum().backward()
            assert kiln.allclose(x.grad, x_ref.grad, atol=1e-6)


@pytest.mark.parametrize("case", ["leading", "middle", "new_dims"])
def test_repeat_by_a_run_time_count_compiles_symbolically(case):
    # DETR's query_embed.unsqueeze(1).repeat(1, bs, 1), Perceiver's latents.repeat(b, 1, 1):
    # repeat by a batch size was left to eager, which restarted the capture with static shapes
    # (one capture per batch size)
    p = kiln.randn(4, 8, requires_grad=True)

    def fn(x):
        if case == "leading":
            r = p.unsqueeze(0).repeat(x.shape[0], 1, 1)
        elif case == "middle":
            r = p.unsqueeze(1).repeat(1, x.shape[0], 2)
        else:
            r = p.repeat(x.shape[0], 1, 1, 1)
        return (r * 2).chunk(2, -1)[0].sum() + x.sum()

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    for b in (2, 3, 5, 6):
        x = kiln.randn(b, 3)
        p.grad = None
        fn(x).backward()
        want = p.grad.clone()
        p.grad = None
        got = compiled(x)
        assert kiln.allclose(got, fn(x), atol=1e-5)
        got.backward()
        assert kiln.allclose(p.grad, want)
    assert len(backend.reports) == 2
