"""Capture corpus, constructs captured whole (2/3): Python functions, closures, lambdas,
partial, argument passing, plain classes, builtins, comprehensions and control flow.

See test_corpus_constructs.py for what every program is checked for.
"""

import dataclasses
import functools
import itertools
import math
from collections import OrderedDict, namedtuple

import pytest
from corpus_util import Corpus, fresh_capture, run_case  # noqa: F401 - autouse fixture

import kiln
import kiln.nn.functional as F

corpus = Corpus()
case = corpus.case


def r(*shape):
    """A random float32 tensor (Corpus.run seeds the generator first)."""
    return kiln.randn(*shape)


def x34():
    return (r(3, 4),)


def x34_y34():
    return (r(3, 4), r(3, 4))


# ---------------------------------------------------------------------------------------------
# Functions, closures, lambdas, partial
# ---------------------------------------------------------------------------------------------
def _helper_inner(t, k):
    return t * k + 1


def _helper_outer(t):
    return _helper_inner(t, 2) - _helper_inner(t.relu(), 3)


@case(x34, ops=6)
def nested_user_calls(x):
    return _helper_outer(x)


@case(x34, ops=2)
def closure_defined_inside(x):
    scale = 3.0

    def inner(t):
        return t * scale + x

    return inner(x)


def _make_scaled(k):
    def scaled(t):
        return t * k

    return scaled


_scaled_by_5 = _make_scaled(5.0)


@case(x34, ops=3)
def closure_from_outside(x):
    return _scaled_by_5(x).sum(dim=0), _make_scaled(2)(x)


@case(x34, ops=3)
def nonlocal_update(x):
    acc = x

    def add(t):
        nonlocal acc
        acc = acc + t

    add(x)
    add(x * 2)
    return acc


@case(x34, ops=3)
def lambdas(x):
    act = lambda t: t.relu() * 2  # noqa: E731 - the construct under test
    return act(x), (lambda a, b=1.0: a - b)(x)


@case(x34, ops=3)
def functools_partial(x):
    soft = functools.partial(F.softmax, dim=-1)
    shift = functools.partial(_helper_inner, k=0.5)
    return soft(x), shift(x)


_global_partial = functools.partial(kiln.clamp, min=-0.5, max=0.5)


@case(x34, ops=1)
def global_partial(x):
    return _global_partial(x)


def _power(t, n):
    return t if n == 1 else t * _power(t, n - 1)


@case(x34, ops=3)
def recursion_on_python_int(x):
    return _power(x, 4)


@case(x34, ops=2)
def default_arguments(x, scale=2.0, bias=None, shift=1):
    y = x * scale
    if bias is not None:
        y = y + bias
    return y + shift


@case(x34, ops=2, kwargs={"scale": 3.0})
def keyword_call_of_compiled_fn(x, *, scale, offset=0.5):
    return x * scale - offset


def _sum_all(*ts):
    return sum(ts[1:], ts[0])


def _weighted(t, **weights):
    return t * weights.get("w", 1.0) + weights["b"]


def _kwonly(t, *, k, j=2):
    return t * k + j


@case(x34_y34, ops=9)
def varargs_and_kwargs(x, y):
    ts = [x, y, x]
    kw = {"w": 2.0, "b": 1.0}
    return _sum_all(*ts), _sum_all(x, y), _weighted(x, **kw), _weighted(y, b=3), _kwonly(x, k=4)


@case(lambda: (r(3), r(3), r(3)), ops=3)
def compiled_fn_with_varargs(*xs):
    return sum(xs)


@case(x34, ops=2)
def nested_function_with_defaults(x):
    def affine(t, a=2.0, *, b=1.0):
        return t * a + b

    return affine(x)


# ---------------------------------------------------------------------------------------------
# Plain classes
# ---------------------------------------------------------------------------------------------
class Scaler:
    """A plain class: attributes, methods, a property, a staticmethod, a classmethod."""

    offset = 1.0

    def __init__(self, k) -> None:
        self.k = k

    def apply(self, t):
        return t * self.k + self.offset

    @property
    def double_k(self):
        return self.k * 2

    @staticmethod
    def clip(t):
        return t.clamp(-1, 1)

    @classmethod
    def shifted(cls, t):
        return t + cls.offset


@case(lambda: (r(3, 4), Scaler(3.0)), ops=6)
def plain_class_methods(x, s):
    return s.apply(x), x * s.double_k, Scaler.clip(x), s.clip(x), Scaler.shifted(x)


_GLOBAL_SCALER = Scaler(0.5)


@case(x34, ops=3)
def global_instance_methods(x):
    return _GLOBAL_SCALER.apply(x) + _GLOBAL_SCALER.k


Pair = namedtuple("Pair", ["left", "right"])


@case(x34, ops=2)
def user_namedtuple(x):
    p = Pair(x, x * 2)
    q = Pair(left=p.right, right=p.left)
    return q, q.left - p[0], isinstance(p, tuple)


# ---------------------------------------------------------------------------------------------
# Builtins over Python values
# ---------------------------------------------------------------------------------------------
@case(lambda: (r(3, 4), [r(4), r(4)]), ops=3)
def isinstance_len_type(x, ws):
    out = x
    if isinstance(x, kiln.Tensor) and isinstance(ws, (list, tuple)) and type(x) is kiln.Tensor:
        for i in range(len(ws)):
            out = out + ws[i]
    if type(ws) is not list:
        out = out * 100
    return out * len(x)


@case(x34, ops=2)
def getattr_hasattr(x):
    name = "sigmoid"
    fn = getattr(kiln, name)
    act = getattr(F, "nonexistent_act", F.relu)
    return fn(x) if hasattr(x, "sigmoid") and not hasattr(x, "nope") else x, act(x)


@case(lambda: ([r(3), r(3), r(3)], [1.0, 2.0, 3.0]), ops=7)
def enumerate_and_zip(xs, ws):
    out = xs[0] * 0
    for i, (t, w) in enumerate(zip(xs, ws, strict=True), start=1):
        out = out + t * (w * i)
    return out


@case(lambda: (r(2, 3, 6, 5),), ops=9)
def itertools_repeat_chain_product(x):
    # torch.nn's _pair / _reverse_repeat_tuple helpers, and padding lists built by chaining
    kernel = tuple(itertools.repeat(2, 2))
    pads = list(itertools.chain.from_iterable((p, p) for p in reversed((1, 0))))
    pads = list(itertools.chain(pads[:2], [0, 1]))
    total = x * 0
    for i, j in itertools.product(range(2), (0, 1)):
        total = total + x[:, :, i::2, j::2].sum() if i == j else total
    return F.avg_pool2d(F.pad(x, pads), kernel), total


@case(x34, ops=4)
def reversed_sorted_min_max_sum(x):
    dims = sorted([1, 0])
    sizes = list(reversed(x.shape))
    k = min(sizes) + max(3, 5) + sum([1, 2, 3])
    return x.sum(dim=dims[0]) * k, x.max(dim=max(dims)).values, sizes


@case(lambda: ([r(3), r(3), r(3)],), ops=6)
def map_and_filter(xs):
    doubled = list(map(lambda t: t * 2, xs))
    odd = list(filter(lambda i: i % 2 == 1, range(5)))
    return kiln.stack(doubled).sum(dim=0) + len(odd), odd


@case(x34, ops=5)
def math_module(x):
    return (x * math.pi + math.log(2.0) - math.ceil(2.3) * math.exp(0.0)
            + math.floor(math.sqrt(10)) + math.tanh(0.5))


@case(lambda: ([r(3), r(3)],), ops=2)
def iter_next(xs):
    it = iter(xs)
    first = next(it)
    second = next(it)
    return first * second + next(it, first)


@case(x34, ops=1)
def python_int_float_conversions(x):
    n = int(x.shape[0] / 2)
    f = float(n) + round(2.6) + abs(-1) + divmod(7, 3)[1]
    return x * f


@dataclasses.dataclass
class Config:
    """A dataclass config passed to the program."""

    scale: float = 2.0
    layers: tuple = (1, 2)
    act: str = "relu"


@case(lambda: (r(3, 4), Config()), ops=3)
def dataclass_config(x, cfg):
    for k in cfg.layers:
        x = x * (cfg.scale + k)
    return getattr(F, cfg.act)(x)


def _pairs(items):
    for i in range(len(items) - 1):
        yield items[i], items[i + 1]


@case(lambda: ([r(3), r(3), r(3)],), ops=5)
def generator_function(xs):
    total = xs[0] * 0
    for a, b in _pairs(xs):
        total = total + a * b
    return total


# ---------------------------------------------------------------------------------------------
# Comprehensions and generator expressions
# ---------------------------------------------------------------------------------------------
@case(x34, ops=2)
def list_comprehension(x):
    ys = [x * i for i in range(1, 4) if i != 2]
    return ys, [y.shape[0] for y in ys]


@case(x34, ops=3)
def dict_comprehension(x):
    d = {name: x * k for k, name in enumerate(["a", "b", "c"])}
    return d, {k: v.shape for k, v in d.items()}


@case(x34, ops=2)
def ordered_dict(x):
    """OrderedDict() as Module.state_dict starts its result: a dict that is an OrderedDict."""
    d = OrderedDict()
    d["w"] = x * 2
    d.update(b=x + 1)
    return d, isinstance(d, OrderedDict), list(d)


@case(x34, ops=1)
def set_comprehension(x):
    dims = {d % 2 for d in range(5)}
    return x.sum(dim=tuple(sorted(dims))), dims


@case(lambda: ([r(3), r(3)],), ops=4)
def generator_expressions(xs):
    total = sum(t * 2 for t in xs)
    shapes = tuple(t.shape[0] for t in xs)
    ok = all(t.dim() == 1 for t in xs) and not any(t.dtype == kiln.int64 for t in xs)
    return total, shapes, ok, list(s + 1 for s in shapes)


# ---------------------------------------------------------------------------------------------
# Control flow on Python values
# ---------------------------------------------------------------------------------------------
@case(lambda: (r(3, 4), [r(4, 4), r(4, 4), r(4, 4)]), ops=6)
def loop_over_tensor_list(x, weights):
    for w in weights:
        x = (x @ w).tanh()
    return x


@case(x34, ops=3)
def while_loop_with_counter(x):
    i = 0
    while i < 3:
        x = x * 0.5
        i += 1
    return x, i


@case(x34, ops=3)
def break_and_continue(x):
    for i in range(10):
        if i == 1:
            continue
        if i > 3:
            break
        x = x + i
    return x


@case(x34, ops=2)
def try_except_without_raise(x):
    try:
        y = x * 2
    except ValueError:
        y = x
    else:
        y = y + 1
    return y


@case(x34, ops=2)
def try_finally(x):
    try:
        y = x - 1
    finally:
        z = 2
    return y * z


@case(lambda: ([r(3), (r(3), r(3)), r(3), r(3)],), ops=3)
def unpacking(xs):
    a, (b, c), *rest = xs
    first, *middle, last = range(5)
    return a + b * c + rest[-1], len(rest), middle, first + last


@case(lambda: (r(3, 4), r(4)), ops=2)
def optional_argument_given(x, bias=None):
    if bias is None:
        return x * 2
    return x * 2 + bias


@case(x34, ops=1)
def optional_argument_missing(x, bias=None):
    return optional_argument_given(x, bias)


@case(lambda: ({"a": r(3), "b": r(3)},), ops=3)
def dict_argument(inputs):
    out = {}
    for k, v in inputs.items():
        out[k + "_sq"] = v * v
    return out, out["a_sq"] + inputs["b"]


@case(x34, ops=2)
def list_and_dict_methods(x):
    items = [x]
    items.append(x * 2)
    items.extend([x + 1])
    items.insert(0, x)
    last = items.pop()
    d = {"k": 1}
    d.update(j=2)
    d.setdefault("m", 3)
    return items[1:], last, sorted(d.values()), list(d.keys()), d.pop("j")


@case(x34, ops=1)
def delete_local(x):
    tmp = x * 2
    out = tmp
    del tmp
    return out


@case(x34, ops=3)
def no_grad_block(x):
    with kiln.no_grad():
        y = x * 2
    z = y + x
    with kiln.enable_grad():
        w = z - 1
    return y, w


@case(lambda: (r(3, 4).requires_grad_(),), ops=2)
def no_grad_on_requires_grad_input(x):
    with kiln.no_grad():
        y = x * 2
    return y, x + y, y.requires_grad


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph", "fullgraph"])
@pytest.mark.parametrize("name", corpus.names())
def test_construct(name, fullgraph):
    corpus.run(name, fullgraph)


def test_break_after_extended_arg_resumes_with_the_full_argument():
    """An instruction whose argument needs an EXTENDED_ARG prefix (here the 301st attribute
    name) breaks inside a loop: the native continuation must start at the prefix."""
    reads = "\n".join(f"    _ = o.a{i} if o is None else None" for i in range(300))
    namespace: dict = {}
    exec(compile(f"def f(x, o):\n{reads}\n    out = x\n    for i in range(2):\n"
                 "        g = x._version\n        out = out + i\n    return out, g\n",
                 "<corpus-extended-arg>", "exec"), namespace)
    info = run_case(namespace["f"], r(3), object(), expect_breaks=1)
    assert info.break_reasons == ["Tensor._version is autograd state"]
