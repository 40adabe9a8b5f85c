"""In-place model code compiles into one part: torchvision-style blocks with ``inplace=True``
activations and ``+=`` residuals, in-place ops on the caller's tensors (written back once, after
the compiled part), and in-place spellings of the op table.

Each case is compiled with the CPU backend, strictly (a decline fails the test), checked against
eager on clones of the same arguments (the arguments after the call too: a mutated input must
hold eager's values), and must be one graph of one compiled part with no eager node.
"""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend


def one_part(fn, *args, dynamic=None, calls=None):
    backend = run_compiled(fn, *args, dynamic=dynamic, calls=calls)
    for report in backend.reports:
        assert len(report.parts) == 1 and report.eager_nodes == 0, report.eager
    return backend


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: ReLU(inplace=True) and `out += identity`."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, depthwise 3x3, 1x1 project, ReLU6, residual."""

    def __init__(self, c=8, expand=4):
        super().__init__()
        h = c * expand
        self.conv = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(inplace=True),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h),
            nn.ReLU6(inplace=True), nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c),
        )  # fmt: skip

    def forward(self, x):
        return x + self.conv(x)


@pytest.mark.parametrize("block", [BasicBlock, InvertedResidual])
def test_torchvision_blocks_compile_into_one_part(block):
    kiln.manual_seed(0)
    m = block().eval()
    one_part(m, rand(2, 8, 9, 9))


def test_basic_block_with_a_dynamic_batch():
    kiln.manual_seed(0)
    one_part(BasicBlock().eval(), rand(2, 8, 7, 7), dynamic=True, calls=[(rand(3, 8, 7, 7),)])


def test_in_place_ops_on_the_callers_tensors_are_written_back():
    def fn(x, y, n):
        x.add_(y, alpha=1)
        x.relu_()
        y *= 2
        n += 1  # a Python number: plain arithmetic
        return x.sum(0) + y, n

    one_part(fn, rand(4, 5), rand(5), 3)


def test_a_view_of_a_mutated_input_sees_the_new_values():
    def fn(x):
        v = x[1:]
        x.mul_(3)
        return v * 1, x.t()

    one_part(fn, rand(4, 5))


def test_in_place_through_a_slice_of_an_input():
    def fn(x, y):
        x[:, 1:3].add_(y)
        return x.exp()

    one_part(fn, rand(4, 5), rand(4, 2))


INPLACE_METHODS = {
    "sin_": lambda y: y.sin_(), "exp_": lambda y: y.exp_(), "clamp_": lambda y: y.clamp_(-1, 1),
    "floor_": lambda y: y.floor_(), "sigmoid_": lambda y: y.sigmoid_(),
    "nan_to_num_": lambda y: y.nan_to_num_(), "abs_": lambda y: y.abs_(),
    "neg_": lambda y: y.neg_(), "reciprocal_": lambda y: y.reciprocal_(),
    "tanh_": lambda y: y.tanh_(), "round_": lambda y: y.round_(decimals=1),
    "lerp_": lambda y: y.lerp_(y * 3, 0.25), "hypot_": lambda y: y.hypot_(y + 1),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(INPLACE_METHODS))
def test_in_place_methods(name):
    def fn(x):
        y = x * 1.5
        INPLACE_METHODS[name](y)
        return y + x

    one_part(fn, rand(3, 7))


@pytest.mark.parametrize("act", [F.relu, F.relu6, F.hardtanh, F.elu, F.leaky_relu, F.silu,
                                 F.selu, F.celu])
def test_inplace_flag_of_functional_activations(act):
    def fn(x):
        z = x * 2
        act(z, inplace=True)
        return z, act(x, inplace=True)

    one_part(fn, rand(3, 7))


def test_in_place_promotion_is_eager_like_eager():
    """An in-place op whose result dtype would not fit its operand raises as in eager."""

    def fn(x):
        x += 0.5
        return x

    with pytest.raises(RuntimeError):
        kiln.compile(fn)(kiln.arange(4))


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention without flash: a registered causal mask sliced to the sequence,
    masked_fill with -inf, softmax, then the `x[:, [-1], :]` head of its generate step."""

    def __init__(self, d=16, heads=2, ctx=8):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.heads = heads
        self.register_buffer("bias", kiln.tril(kiln.ones(ctx, ctx)).view(1, 1, ctx, ctx))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)[:, [-1], :]


def test_masked_fill_causal_attention_with_the_last_token_head():
    kiln.manual_seed(0)
    m = CausalSelfAttention().eval()
    one_part(m, rand(2, 8, 16))
    one_part(m, rand(2, 5, 16), calls=[(rand(2, 7, 16),), (rand(2, 6, 16),)])  # T turns symbolic


def _same_as_eager(fn, make, calls=2):
    """`fn` compiled strictly (a decline raises) and eager on fresh argument tuples from
    `make()`: results and the arguments afterwards are equal, call after call (the first call
    captures), and no node ran eagerly."""
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(fn, backend=backend)
    for _ in range(calls):
        ours, theirs = make(), make()
        out, ref = compiled(*ours), fn(*theirs)
        for a, b in zip((out, *ours), (ref, *theirs), strict=True):
            assert kiln.equal(a, b), (a, b)
    assert backend.reports and all(r.eager_nodes == 0 for r in backend.reports)


def test_inputs_sharing_storage_see_each_others_writes():
    def g(a, b):
        a.add_(1)
        b.mul_(2)
        return a + b

    _same_as_eager(g, lambda: (rand(2, 3), rand(2, 3, seed=1)))  # captured for distinct inputs

    def same(fn, make):
        compiled = kiln.compile(fn)
        t, u = make(), make()
        assert kiln.equal(compiled(*t), fn(*u)) and kiln.equal(t[0], u[0])

    same(g, lambda: (lambda x: (x, x))(rand(2, 3)))
    same(g, lambda: (lambda x: (x, x.view(2, 3)))(rand(2, 3)))
    same(lambda a, b: (a.add_(1), b * 1)[1], lambda: (lambda x: (x, x[0]))(rand(2, 3)))


def test_in_place_spellings_by_position_dunder_and_bitwise_operators():
    _same_as_eager(lambda x: F.leaky_relu(x, 0.5, True) * 1, lambda: (rand(2, 5),))
    _same_as_eager(lambda x: F.elu(x, 0.5, True) * 1, lambda: (rand(2, 5),))
    _same_as_eager(lambda x: x.__imul__(3) * 1, lambda: (rand(2, 5),))

    def bits(m, x):
        m |= x * 2
        m &= x + 5
        m ^= x
        return m * 3

    _same_as_eager(bits, lambda: (kiln.tensor([1, 2, 4]), kiln.tensor([1, 3, 1])))
