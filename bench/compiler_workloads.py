"""The workloads of bench/compiler.py, written once against the torch API for either framework.

A workload is model code that runs unchanged under `torch` and under `kiln` (like
tools/demo.py's model): every builder takes an `Fw` (the framework's module, `nn`, `F`) and
returns a fresh callable with its arguments. Inputs and weights come from NumPy with a fixed
seed, so both frameworks compute on the same values, and a kiln-only process (the compile-time
and memory measurements) never imports torch.

Sizes are chosen from the machine's cache sizes: each case carries its working set (bytes read
plus bytes written once: inputs, weights, outputs) and is labelled L2 / L3 / DRAM by the
smallest cache level that holds it.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

F32 = 4  # bytes per float32 element
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- frameworks --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Fw:
    """One framework's namespace as model code sees it: `torch`, `torch.nn`, `torch.nn.functional`
    (or kiln's spelling of each)."""

    name: str
    mod: Any
    nn: Any
    F: Any

    def tensor(self, array: np.ndarray):
        """A tensor of this framework holding a copy of `array`."""
        return self.mod.from_numpy(np.ascontiguousarray(array).copy())

    def numpy(self, value) -> np.ndarray:
        """`value` (a tensor, or a tuple whose first item is one) as a NumPy array (no copy)."""
        if isinstance(value, (tuple, list)):
            value = value[0]
        return np.asarray(value.detach().numpy())


def framework(name: str) -> Fw:
    """The `Fw` of "kiln" or "torch" (imported on first use)."""
    mod = importlib.import_module(name)
    return Fw(name, mod, importlib.import_module(f"{name}.nn"),
              importlib.import_module(f"{name}.nn.functional"))


def fresh_copy(fn):
    """`fn` with its own code object: both frame hooks cache per code object, so every compiled
    variant gets its own and none hits another's cache entries."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


# -- caches and labels -------------------------------------------------------------------------
def cache_sizes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict:
    """{"L1": bytes, "L2": bytes, "L3": bytes} of the data/unified caches of cpu0 (sysfs);
    a level the machine does not report falls back to a common size."""
    sizes = {"L1": 32 << 10, "L2": 1 << 20, "L3": 32 << 20}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return sizes
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(root, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, entry, "size")) as f:
                size = parse_size(f.read())
        except (OSError, ValueError):
            continue
        if kind != "Instruction":
            sizes[f"L{level}"] = size
    return sizes


def parse_size(text: str) -> int:
    """sysfs cache size text ("48K", "2048K", "300M") in bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def level_of(ws_bytes: int, caches: dict) -> str:
    """The smallest cache level holding `ws_bytes`: "L2", "L3" or "DRAM" (L1 counts as L2)."""
    if ws_bytes <= caches["L2"]:
        return "L2"
    if ws_bytes <= caches["L3"]:
        return "L3"
    return "DRAM"


def targets(caches: dict) -> dict:
    """Working-set targets of the memory-bound workloads, one per level: half of L2, an eighth
    of L3 (at least 4x L2), twice L3 (at most 2 GiB: a shared machine's memory)."""
    return {"L2": caches["L2"] // 2,
            "L3": max(4 * caches["L2"], caches["L3"] // 8),
            "DRAM": min(2 * caches["L3"], 2 << 30)}


def human_bytes(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# -- weights -----------------------------------------------------------------------------------
def load_seeded_weights(fw: Fw, module, seed: int) -> None:
    """Fills every entry of `module`'s state_dict from a seeded NumPy generator (keys sorted, so
    both frameworks get the same values): matrices ~ N(0, 1/fan_in), norm scales 1 + N(0, 0.1),
    biases and running means N(0, 0.05), running variances U(0.5, 1.5)."""
    rng = np.random.default_rng(seed)
    state = module.state_dict()
    new = {}
    for key in sorted(state):
        shape = tuple(state[key].shape)
        if key.endswith("num_batches_tracked"):
            new[key] = fw.tensor(np.zeros(shape, np.int64))
            continue
        if key.endswith("running_var"):
            arr = rng.uniform(0.5, 1.5, shape)
        elif len(shape) >= 2:
            arr = rng.standard_normal(shape) / math.sqrt(math.prod(shape[1:]))
        elif key.endswith("weight"):
            arr = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            arr = 0.05 * rng.standard_normal(shape)
        new[key] = fw.tensor(arr.astype(np.float32))
    module.load_state_dict(new)
    module.eval()


def randn(seed: int, *shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


# -- the workloads: functions --------------------------------------------------------------------
def pointwise_chain(x, y):
    """Six elementwise ops: six passes over memory in eager, one fused loop when compiled."""
    t = x * y
    t = t + 1.0
    t = t.tanh()
    t = t * 0.5
    t = t - y
    return t.relu()


def softmax_rows(x):
    """Softmax over the last dim (rows x 4096)."""
    return x.softmax(dim=-1)


def sum_mean(x):
    """`x.sum(-1).mean()`: a row reduction feeding a full reduction."""
    return x.sum(-1).mean()


def tiny(x):
    """One op on a 4-element tensor: a call of it is all overhead."""
    return x + 1.0


# -- the workloads: modules (classes per framework, like tools/demo.py) ------------------------
_CLASSES: dict = {}


def classes(fw: Fw) -> types.SimpleNamespace:
    """The module classes of the workloads, defined with `fw.nn` / `fw.F` (once per framework)."""
    if fw.name in _CLASSES:
        return _CLASSES[fw.name]
    nn, F = fw.nn, fw.F

    class LayerNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d)

        def forward(self, x):
            return self.ln(x)

    class Mlp(nn.Module):
        """Linear(d, 4d) -> GELU -> Linear(4d, d)."""

        def __init__(self, d, approximate="none"):
            super().__init__()
            self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.approximate = approximate

        def forward(self, x):
            return self.proj(F.gelu(self.fc(x), approximate=self.approximate))

    class Attention(nn.Module):
        """qkv projection, causal scaled-dot-product attention over `heads`, output projection."""

        def __init__(self, d, heads):
            super().__init__()
            self.d, self.heads = d, heads
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).split(self.d, dim=-1)
            q, k, v = (z.view(b, t, self.heads, self.d // self.heads).transpose(1, 2)
                       for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, self.d))

    class DecoderBlock(nn.Module):
        """A GPT-2 block: x + attn(ln_1(x)), then + mlp(ln_2(x)) with tanh-GELU."""

        def __init__(self, d, heads):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn, self.mlp = Attention(d, heads), Mlp(d, approximate="tanh")

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class ConvBnRelu(nn.Module):
        """Conv2d 3x3 (no bias) -> BatchNorm2d (eval: running statistics) -> ReLU."""

        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(c)

        def forward(self, x):
            return F.relu(self.bn(self.conv(x)))

    class TokenEmbedding(nn.Module):
        """GPT-2's input layer: token embedding (a gather) plus position embedding."""

        def __init__(self, vocab, ctx, d):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)

        def forward(self, ids):
            return self.wte(ids) + self.wpe.weight[: ids.shape[-1]]

    class LossHead(nn.Module):
        """The language-model loss: cross entropy of logits against next-token targets."""

        def forward(self, logits, targets):
            return F.cross_entropy(logits, targets)

    ns = types.SimpleNamespace(LayerNorm=LayerNorm, Mlp=Mlp, Attention=Attention,
                               DecoderBlock=DecoderBlock, ConvBnRelu=ConvBnRelu,
                               TokenEmbedding=TokenEmbedding, LossHead=LossHead)
    _CLASSES[fw.name] = ns
    return ns


def n_params(shapes: list) -> int:
    return sum(math.prod(s) for s in shapes)


# -- cases ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    """One workload at one size.

    build(fw) -> (callable, args): a fresh function copy or a freshly built module (seeded
    weights) and its inputs. ws_bytes: bytes read + written once (inputs, weights, outputs);
    memory_bound: whether GB/s against STREAM triad is meaningful.
    """

    workload: str
    size: str
    ws_bytes: int
    memory_bound: bool
    build: Callable
    level: str = ""


def _fn_case(workload, size, ws, fn, arrays) -> Case:
    def build(fw: Fw):
        return fresh_copy(fn), tuple(fw.tensor(a) for a in arrays())

    return Case(workload, size, ws, True, build)


def _module_case(workload, size, ws, memory_bound, make, arrays, seed=1) -> Case:
    def build(fw: Fw):
        module = make(classes(fw))
        load_seeded_weights(fw, module, seed)
        return module, tuple(fw.tensor(a) for a in arrays())

    return Case(workload, size, ws, memory_bound, build)


def _rows(ws: int, bytes_per_row: int, multiple: int = 8) -> int:
    return max(multiple, ws // bytes_per_row // multiple * multiple)


def memory_bound_cases(ws_targets: dict) -> list:
    """pointwise chain, softmax, layer_norm and sum-mean, one case per working-set target."""
    cases = []
    for _, ws in ws_targets.items():
        n = _rows(ws, 3 * F32, 1024)  # read x, y; write out
        cases.append(_fn_case("pointwise chain (6 ops)", f"{n:,} elems", 3 * n * F32,
                              pointwise_chain, lambda n=n: (randn(2, n), randn(3, n))))
    for _, ws in ws_targets.items():
        r = _rows(ws, 2 * 4096 * F32)
        cases.append(_fn_case("softmax", f"{r} x 4096", 2 * r * 4096 * F32, softmax_rows,
                              lambda r=r: (randn(4, r, 4096),)))
    d = 1024
    for _, ws in ws_targets.items():
        r = _rows(ws - 2 * d * F32, 2 * d * F32)  # weight and bias count too
        cases.append(_module_case("layer_norm", f"{r} x {d}", (2 * r * d + 2 * d) * F32, True,
                                  lambda c, d=d: c.LayerNorm(d), lambda r=r: (randn(5, r, d),)))
    for _, ws in ws_targets.items():
        r = _rows(ws - F32, 1024 * F32)
        cases.append(_fn_case("x.sum(-1).mean()", f"{r} x 1024", (r * 1024 + 1) * F32, sum_mean,
                              lambda r=r: (randn(6, r, 1024),)))
    return cases


def compute_cases(d: int, heads: int, mlp_tokens: list, attn_tokens: list, gpt_tokens: list,
                  conv: list) -> list:
    """GELU-MLP, attention and GPT-2-style decoder blocks (batch 1, `d` wide), conv-bn-relu
    (batch, channels, side): working sets count weights, input and output once."""
    cases = []
    mlp_w = n_params([(4 * d, d), (4 * d,), (d, 4 * d), (d,)])
    attn_w = n_params([(3 * d, d), (3 * d,), (d, d), (d,)])
    for t in mlp_tokens:
        cases.append(_module_case("GELU-MLP block", f"d={d}, {t} tokens",
                                  (mlp_w + 2 * t * d) * F32, False, lambda c: c.Mlp(d),
                                  lambda t=t: (randn(7, 1, t, d),)))
    for t in attn_tokens:
        cases.append(_module_case("attention block", f"d={d}, {heads} heads, {t} tokens",
                                  (attn_w + 2 * t * d) * F32, False,
                                  lambda c: c.Attention(d, heads),
                                  lambda t=t: (randn(8, 1, t, d),)))
    for t in gpt_tokens:
        cases.append(_module_case("decoder block (GPT-2 small)", f"d={d}, {heads} heads, {t} tok",
                                  (mlp_w + attn_w + 4 * d + 2 * t * d) * F32, False,
                                  lambda c: c.DecoderBlock(d, heads),
                                  lambda t=t: (randn(9, 1, t, d),)))
    for n, ch, side in conv:
        act = n * ch * side * side
        cases.append(_module_case("conv-bn-relu", f"{n}x{ch}x{side}x{side}",
                                  (2 * act + ch * ch * 9 + 4 * ch) * F32, False,
                                  lambda c, ch=ch: c.ConvBnRelu(ch),
                                  lambda n=n, ch=ch, side=side: (randn(10, n, ch, side, side),)))
    return cases


def tokens(seed: int, high: int, *shape) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape, dtype=np.int64)


def gather_cases(vocab: int, d: int, batch_tokens: tuple, loss_tokens: int) -> list:
    """The gathers of a GPT: the embedding layer (token ids -> rows of a vocab x d table, plus
    positions) and the cross-entropy loss of `loss_tokens` tokens over `vocab` classes; the
    working set counts the rows and logits read (the table only as far as it is read)."""
    b, t = batch_tokens
    n = b * t
    return [
        _module_case("token + position embedding", f"{b}x{t} ids, d={d}",
                     (n * 2 + 2 * n * d + t * d) * F32, True,
                     lambda c: c.TokenEmbedding(vocab, t, d), lambda: (tokens(11, vocab, b, t),)),
        _module_case("cross-entropy loss", f"{loss_tokens} x {vocab} logits",
                     (loss_tokens * vocab + 2 * loss_tokens + 1) * F32, True,
                     lambda c: c.LossHead(),
                     lambda: (randn(12, loss_tokens, vocab), tokens(13, vocab, loss_tokens))),
    ]


def all_cases(quick: bool, caches: dict) -> list:
    """Every case of one run, labelled by working set. `quick`: one small size per workload."""
    if quick:
        small = {"L2": min(caches["L2"] // 4, 256 << 10)}
        cases = memory_bound_cases(small) + compute_cases(
            128, 4, [32], [32], [32], [(1, 16, 16)]) + gather_cases(512, 128, (2, 32), 64)
    else:
        cases = memory_bound_cases(targets(caches)) + compute_cases(
            768, 12, [128, 1024], [128, 512], [128, 256], [(1, 64, 56), (8, 64, 56)]
        ) + gather_cases(50257, 768, (8, 512), 1024)
    for case in cases:
        case.level = level_of(case.ws_bytes, caches)
    return cases


# -- the backend, threads, and the measurements made in a fresh process ------------------------
def kiln_backend(choice: str):
    """(backend argument of kiln.compile, its description): kiln's default when
    kiln._capture.backend_compiled exists (or --kiln-backend default), else "eager" as a
    stand-in."""
    if choice == "eager":
        return "eager", 'backend="eager" (chosen with --kiln-backend eager)'
    try:
        import kiln
        from kiln._capture import backend_compiled

        if not hasattr(kiln._C, "_compiler"):
            raise ImportError("kiln._C has no _compiler (rebuild: scripts/build.sh)")
        if not backend_compiled.default_backend_enabled():
            raise ImportError("KILN_BACKEND=eager turns the compiler off")
    except ImportError as e:
        if choice == "default":
            raise SystemExit(f"--kiln-backend default: {type(e).__name__}: {e}") from e
        return "eager", ('backend="eager" stands in (the CPU compiler is not available: '
                         f"{e}), so no kernel is compiled")
    return None, "its default backend, kiln's CPU compiler (kiln._capture.backend_compiled)"


def set_threads(n: int, with_torch: bool = True) -> None:
    import kiln

    kiln.set_num_threads(n)
    if with_torch:
        import torch

        torch.set_num_threads(n)


def hwm_kb() -> tuple:
    """(VmHWM, VmRSS) of this process in kB."""
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                key, v = line.split(":")
                vals[key] = int(v.split()[0])
    return vals["VmHWM"], vals["VmRSS"]


def child_compile(args) -> dict:
    """In a fresh process: eager call time, then first compiled call (cold: this process's
    caches are empty and the cache folder is whatever the parent set), reset, first call again
    (warm); seconds are first call minus eager, memory the ru_maxrss growth of the cold call."""
    fwname = args.fw
    set_threads(args.threads, with_torch=fwname == "torch")
    fw = framework(fwname)
    case = all_cases(args.quick, cache_sizes())[args.case]
    fn, fargs = case.build(fw)
    mod = fw.mod
    with mod.no_grad():
        return _first_calls(fw, fn, fargs, args.kiln_backend)


def _first_calls(fw: Fw, fn, fargs, kiln_choice: str) -> dict:
    mod = fw.mod
    eager = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn(*fargs)
        eager.append(time.perf_counter() - t0)
    t_eager = statistics.median(eager)
    if fw.name == "kiln":
        backend = kiln_backend(kiln_choice)[0]
        compile_ = lambda f: mod.compile(f, backend=backend, dynamic=False)  # noqa: E731
        reset = mod.compiler.reset
    else:
        compile_ = lambda f: mod.compile(f, dynamic=False)  # noqa: E731
        reset = mod._dynamo.reset
    firsts = []
    # The peak RSS of the compile: ru_maxrss would start at the *parent's* high-water (Linux
    # carries it across exec), so read VmHWM, the same high-water of this process image only,
    # restarted here so the peaks of imports and set-up do not hide the compile's.
    reset_hwm()
    _, rss0 = hwm_kb()
    for i in range(2):
        reset()
        target = fn if isinstance(fn, mod.nn.Module) else fresh_copy(fn)
        t0 = time.perf_counter()
        compile_(target)(*fargs)
        firsts.append(time.perf_counter() - t0 - t_eager)
        if i == 0:
            hwm1, _ = hwm_kb()
    return {"first_s": firsts[0], "again_s": firsts[1], "rss_mb": (hwm1 - rss0) / 1024}


def reset_hwm() -> None:
    """Restarts this process's RSS high-water (VmHWM) at the current RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def child_memory(args) -> dict:
    """In a fresh process: the GPT-style model (tools/demo.py), eager or compiled; after two
    calls (compile included), the RSS high-water is reset (/proc/self/clear_refs) and the peak
    above the resident size before 3 more forwards is returned."""
    fwname = args.fw
    set_threads(args.threads, with_torch=fwname == "torch")
    fw = framework(fwname)
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from demo import build_gpt

    d, heads, layers, batch, tokens = gpt_shape(args.quick)
    model = build_gpt(fw.mod, fw.nn, fw.F, d=d, heads=heads, layers=layers, ctx=tokens)
    load_seeded_weights(fw, model, 11)
    idx = fw.mod.from_numpy(np.random.default_rng(0).integers(0, 512, size=(batch, tokens)))
    if args.mode == "compiled":
        if fwname == "kiln":
            model = fw.mod.compile(model, backend=kiln_backend(args.kiln_backend)[0])
        else:
            model = fw.mod.compile(model)
    grad = fw.mod.no_grad()
    with grad:
        for _ in range(2):
            model(idx)
        reset_hwm()
        _, base = hwm_kb()
        for _ in range(3):
            out = model(idx)
            del out
        peak, _ = hwm_kb()
    return {"peak_mb": (peak - base) / 1024, "base_mb": base / 1024}


def gpt_shape(quick: bool) -> tuple:
    """(d, heads, layers, batch, tokens) of the memory measurement's GPT-style model."""
    return (64, 4, 2, 2, 32) if quick else (768, 12, 2, 4, 256)


