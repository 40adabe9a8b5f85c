"""kiln._capture.graph: building graphs by hand, their Python source and compiled form
(checked against running the same ops eagerly), erase_unused, and node names."""

import math
import operator

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln._capture.graph import Graph, Node, is_impure, sanitize_name, sym_size, target_name


def _example(v):
    if isinstance(v, Node):
        return v.meta["example"]
    if type(v) in (tuple, list):
        return type(v)(_example(x) for x in v)
    if isinstance(v, slice):
        return slice(_example(v.start), _example(v.stop), _example(v.step))
    return v


def rec(g, target, *args, loc=None, **kwargs):
    """Runs `target` eagerly on the examples and records the call, as the evaluator does."""
    example = target(*_example(args), **{k: _example(v) for k, v in kwargs.items()})
    return g.call(target, args, kwargs, example, loc=loc)


def same(a, b):
    """Exact equality of two kiln tensors (or Python values)."""
    if isinstance(a, kiln.Tensor):
        assert isinstance(b, kiln.Tensor)
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    else:
        assert type(a) is type(b) and a == b


def fresh(*shape, seed=0):
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


# --- building --------------------------------------------------------------------------------


def test_builds_nodes_users_and_counts():
    g = Graph()
    x, y = g.placeholder("x", fresh(2, 3)), g.placeholder("y", fresh(3))
    t0 = rec(g, kiln.add, x, y)
    t1 = rec(g, kiln.Tensor.view, t0, 3, 2)
    t2 = rec(g, kiln.cat, [t0, t0], 1)
    out = g.output([t1, t2])
    ops = ["placeholder", "placeholder", "call", "call", "call", "output"]
    assert [n.op for n in g.nodes] == ops
    assert g.inputs == [x, y] and g.outputs == [t1, t2] and g.op_count() == 3
    assert x.users == [t0] and y.users == [t0]
    assert t0.users == [t1, t2]  # cat mentions t0 twice but is one user
    assert t1.users == [out] and t2.users == [out]
    assert t2.args == ([t0, t0], 1) and t2.kwargs == {}
    assert t0.target is kiln.add and t1.target is kiln.Tensor.view
    assert x.meta["loc"] is None and "sym_sizes" not in x.meta


def test_placeholders_stay_first_and_keep_meta():
    g = Graph()
    x = g.placeholder("x", fresh(4, 2), sym_sizes=["s0", 2])
    t0 = rec(g, kiln.neg, x, loc=("/src/model.py", 7))
    late = g.placeholder("w", fresh(2))  # a weight discovered after the first call
    rec(g, kiln.mul, t0, late)
    assert g.nodes[:2] == [x, late] and g.inputs == [x, late]
    assert x.meta["sym_sizes"] == ["s0", 2] and t0.meta["loc"] == ("/src/model.py", 7)


def test_names_are_unique_and_sanitized():
    g = Graph()
    names = [
        g.placeholder(n, 1).name
        for n in ["self.fc1.weight", "x", "x", "L['x']", "0abc", "class", "", "t0", "add_"]
    ]
    assert names == ["self_fc1_weight", "x", "x_1", "L_x", "_0abc", "class_", "arg", "t0", "add_"]
    calls = [rec(g, operator.add, g.inputs[1], 1).name for _ in range(3)]
    assert calls == ["t1", "t2", "t3"]  # t0 is a placeholder's name
    assert sanitize_name("a.b-c d") == "a_b_c_d" and sanitize_name("lambda") == "lambda_"


def test_building_errors():
    g, other = Graph(), Graph()
    x = g.placeholder("x", fresh(2))
    with pytest.raises(ValueError, match="does not belong"):
        other.call(kiln.neg, (x,), {}, fresh(2))
    with pytest.raises(ValueError, match="does not belong"):
        other.output([(1, [x])])
    out = g.output([x])
    with pytest.raises(ValueError, match="does not belong"):
        other.call(kiln.neg, (out,), {}, None)
    with pytest.raises(RuntimeError, match="already set"):
        g.output([x])
    with pytest.raises(RuntimeError, match="no calls can follow"):
        g.call(kiln.neg, (x,), {}, fresh(2))


def test_target_names_are_stable():
    assert target_name(kiln.add) == "kiln.add"
    assert target_name(kiln.Tensor.view) == "kiln.Tensor.view"
    assert target_name(kiln.Tensor.float) == "kiln.Tensor.float"
    assert target_name(kiln.Tensor.__getitem__) == "kiln.Tensor.__getitem__"
    assert target_name(F.dropout) == "kiln.nn.functional.dropout"
    assert target_name(F.gelu) == "kiln.nn.functional.gelu"  # bound from its F.gelu spelling
    assert target_name(operator.getitem) == "operator.getitem"
    assert target_name(math.sqrt) == "math.sqrt"
    assert target_name(sym_size) == "kiln._capture.graph.sym_size"

    def local_fn():
        pass

    assert target_name(local_fn).endswith("test_target_names_are_stable.<locals>.local_fn")
    assert "0x" not in target_name(local_fn)


# --- Python source -----------------------------------------------------------------------------


def test_python_source_golden():
    """Intermediates are deleted right after their last use (outputs and inputs never)."""
    g = Graph()
    x, y = g.placeholder("x", fresh(2, 3)), g.placeholder("self.w", fresh(3))
    t0 = rec(g, kiln.add, x, y, loc=("/home/u/model.py", 12))
    t1 = rec(g, operator.mul, t0, 2.5)
    t2 = rec(g, kiln.Tensor.view, t1, -1)
    t3 = rec(g, operator.getitem, t2, (slice(1, None, 2), None, Ellipsis))
    t4 = rec(g, kiln.Tensor.to, t3, kiln.float64)
    t5 = rec(g, kiln.Tensor.sum, t1, dim=1, keepdim=True)
    t6 = rec(g, operator.neg, t5)
    t7 = rec(g, kiln.max, t1, 1)
    t8 = rec(g, operator.getitem, t7, 0)
    g.output([t4, t6, t8, 3])
    assert g.python_source() == (
        "def forward(x, self_w):\n"
        "    t0 = add(x, self_w)  # model.py:12\n"
        "    t1 = t0 * 2.5\n"
        "    del t0\n"
        "    t2 = Tensor_view(t1, -1)\n"
        "    t3 = t2[1::2, None, ...]\n"
        "    del t2\n"
        "    t4 = Tensor_to(t3, float64)\n"
        "    del t3\n"
        "    t5 = Tensor_sum(t1, dim=1, keepdim=True)\n"
        "    t6 = -t5\n"
        "    del t5\n"
        "    t7 = max(t1, 1)\n"
        "    del t1\n"
        "    t8 = t7[0]\n"
        "    del t7\n"
        "    return (t4, t6, t8, 3)\n"
    )
    assert str(g) == g.python_source()


def test_python_source_avoids_name_clashes():
    g = Graph()
    add = g.placeholder("add", fresh(3))  # a user input named like a target
    t0 = rec(g, kiln.add, add, add)
    t1 = rec(g, kiln.Tensor.add, t0, add)
    t2 = rec(g, kiln.Tensor.add_, t1, 1.0)
    g.output([t2])
    src = g.python_source()
    assert "t0 = kiln_add(add, add)\n" in src
    assert "t1 = Tensor_add(t0, add)\n" in src and "t2 = Tensor_add_(t1, 1.0)\n" in src
    f = g.compile_python()
    a = fresh(3, seed=1)
    same(f(a)[0], a + a + a + 1.0)


# --- compiled form vs eager ----------------------------------------------------------------------


def test_compile_python_matches_eager():
    g = Graph()
    x, w, b = (g.placeholder(n, fresh(*s, seed=i)) for i, (n, s) in
               enumerate([("x", (4, 8)), ("w", (6, 8)), ("b", (6,))]))  # fmt: skip
    h = rec(g, F.linear, x, w, b)
    h = rec(g, F.gelu, h, approximate="tanh")
    h2 = rec(g, kiln.Tensor.view, h, 2, 2, 6)
    c = rec(g, kiln.cat, [h2, h2], 1)
    m = rec(g, kiln.max, c, -1)
    vals, idx = rec(g, operator.getitem, m, 0), rec(g, operator.getitem, m, 1)
    s = rec(g, operator.getitem, c, (Ellipsis, slice(None, 3)))
    q = rec(g, operator.truediv, rec(g, operator.sub, 1.0, s), 3)
    cast = rec(g, kiln.Tensor.to, q, dtype=kiln.float64)
    g.output([vals, idx, cast, h])

    xs = [fresh(4, 8, seed=10), fresh(6, 8, seed=11), fresh(6, seed=12)]
    got = g.compile_python()(*xs)
    h = F.gelu(F.linear(*xs), approximate="tanh")
    c = kiln.cat([h.view(2, 2, 6), h.view(2, 2, 6)], 1)
    m = kiln.max(c, -1)
    want = (m[0], m[1], ((1.0 - c[..., :3]) / 3).to(dtype=kiln.float64), h)
    assert isinstance(got, tuple) and len(got) == 4
    for a, e in zip(got, want, strict=True):
        same(a, e)


def test_compile_python_int_arithmetic_matches_python():
    g = Graph()
    x = g.placeholder("x", fresh(6, 4), sym_sizes=["s0", 4])
    n = g.call(sym_size, (x, 0), {}, 6)
    ops = [operator.floordiv, operator.mod, operator.pow, operator.sub, operator.lshift]
    outs = [rec(g, op, n, 4) for op in ops] + [rec(g, operator.neg, n), rec(g, max, n, 8)]
    outs.append(rec(g, operator.getitem, x, (slice(None, n), slice(-3, None))))
    g.output(outs)
    f = g.compile_python()
    for rows in (6, 9, 1):
        t = fresh(rows, 4, seed=rows)
        got = f(t)
        want = [op(rows, 4) for op in ops] + [-rows, max(rows, 8)]
        assert list(got[:-1]) == want
        same(got[-1], t[:rows, -3:])


def test_compile_python_constants_and_special_values():
    g = Graph("consts")
    x = g.placeholder("x", fresh(2, 3))
    t0 = rec(g, kiln.clamp, x, min=-math.inf, max=0.5)
    t1 = rec(g, kiln.Tensor.to, t0, kiln.device("cpu"), kiln.float64)
    t2 = rec(g, kiln.where, rec(g, operator.lt, x, 0), x, math.inf)
    t3 = rec(g, kiln.nan_to_num, t2, nan=0.0, posinf=1e30)
    g.output([t1, t3, None, "s", (1, 2)])
    src = g.python_source()
    assert "neg_inf" in src and "device_cpu" in src and "float64" in src and "inf)" in src
    got = g.compile_python()(x.meta["example"])
    e = x.meta["example"]
    same(got[0], kiln.clamp(e, min=-math.inf, max=0.5).to(kiln.float64))
    same(got[1], kiln.nan_to_num(kiln.where(e < 0, e, math.inf), nan=0.0, posinf=1e30))
    assert got[2:] == (None, "s", (1, 2))


def test_compile_python_runs_mutations_in_order():
    g = Graph()
    x, y = g.placeholder("x", fresh(3)), g.placeholder("y", fresh(3, seed=1))
    t0 = g.call(operator.setitem, (x, 0, 5.0), {}, None)
    t1 = g.call(operator.iadd, (x, y), {}, x.meta["example"])
    t2 = rec(g, kiln.Tensor.mul, x, 2)
    g.output([t2, t0])
    src = g.python_source()
    assert "    x[0] = 5.0; t0 = None\n" in src and "t1 = operator_iadd(x, y)" in src
    a, b = fresh(3, seed=5), fresh(3, seed=6)
    want_x = a.clone()
    want_x[0] = 5.0
    want_x += b
    got = g.compile_python()(a, b)
    same(a, want_x)  # the input was mutated
    same(got[0], want_x * 2)
    assert got[1] is None and t1.name == "t1"


def test_compiled_function_calls_targets_directly():
    g = Graph()
    x = g.placeholder("x", fresh(3))
    t = x
    for _ in range(5):
        t = rec(g, kiln.exp, t)
    g.output([t])
    f = g.compile_python()
    assert f.__globals__["exp"] is kiln.exp
    assert f.__code__.co_names == ("exp",)  # straight-line code: no interpreter loop or lookups
    assert f.__kiln_source__ == g.python_source()
    same(f(fresh(3, seed=2))[0], kiln.exp(kiln.exp(kiln.exp(kiln.exp(kiln.exp(fresh(3, seed=2)))))))


def test_compiled_errors_point_at_the_generated_source():
    g = Graph()
    x = g.placeholder("x", fresh(2, 3))
    g.output([rec(g, kiln.Tensor.view, x, 6)])
    f = g.compile_python()
    with pytest.raises(Exception) as info:
        f(fresh(4, 3))
    frames = [tb for tb in info.traceback if "kiln-graph" in str(tb.path)]
    assert frames and "Tensor_view(x, 6)" in str(frames[-1].statement)


# --- erase_unused ------------------------------------------------------------------------------


def test_erase_unused_removes_dead_pure_chains():
    g = Graph()
    x = g.placeholder("x", fresh(4))
    dead = rec(g, kiln.neg, rec(g, kiln.exp, rec(g, operator.add, x, 1)))
    rec(g, kiln.sum, dead)
    live = rec(g, kiln.relu, x)
    g.output([live])
    assert g.op_count() == 5
    g.erase_unused()
    assert [n.name for n in g.nodes] == ["x", "t4", "output"]
    assert x.users == [live] and g.op_count() == 1
    same(g.compile_python()(fresh(4, seed=3))[0], kiln.relu(fresh(4, seed=3)))


def test_erase_unused_keeps_side_effects():
    g = Graph()
    x = g.placeholder("x", fresh(4))
    y = rec(g, kiln.Tensor.clone, x)
    keep = [
        g.call(kiln.Tensor.add_, (y, 1.0), {}, y.meta["example"]),
        g.call(operator.setitem, (y, 0, 1.0), {}, None),
        g.call(operator.iadd, (y, 1.0), {}, y.meta["example"]),
        g.call(kiln.Tensor.__setitem__, (y, 1, 2.0), {}, None),
        g.call(kiln.add, (x, 1.0), {"out": y}, y.meta["example"]),
        g.call(F.relu, (y,), {"inplace": True}, y.meta["example"]),
        rec(g, F.dropout, x, 0.5),
        rec(g, kiln.rand, 3),
        rec(g, kiln.randn, 3),
        rec(g, kiln.randint, 0, 5, (3,)),
        rec(g, kiln.bernoulli, rec(g, kiln.full, (3,), 0.5)),
        g.call(print, ("x is", x), {}, None),
        g.call(kiln.manual_seed, (0,), {}, None),
    ]
    pure_dead = rec(g, kiln.exp, y)
    g.output([])
    g.erase_unused()
    assert all(n in g.nodes for n in keep) and y in g.nodes
    assert pure_dead not in g.nodes and pure_dead.graph is None
    assert all(is_impure(n) for n in keep) and not is_impure(y)
    for pure in (kiln.Tensor.__iter__, kiln.Tensor.__invert__, kiln.Tensor.__getitem__, kiln.exp):
        assert not is_impure(Graph().call(pure, (), {}, None))


def test_erased_nodes_cannot_be_used_again():
    g = Graph()
    x = g.placeholder("x", fresh(2))
    dead = rec(g, kiln.exp, x)
    g.erase_unused()
    with pytest.raises(ValueError, match="does not belong"):
        g.call(kiln.neg, (dead,), {}, None)
