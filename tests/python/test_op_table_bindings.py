"""The eager bindings generated from the op table (frontend/csrc/bind_op_table.cc): every
spelling of a row with an eager kernel is callable, binds its arguments to the row's schema,
refuses a wrong call in torch's words, and honours the in-place, reflected and out= forms."""

import inspect
import operator

import numpy as np
import pytest
import torch

import kiln
import kiln.nn.functional as F
from kiln._capture import op_table


def _error(fn):
    try:
        fn()
    except TypeError as e:
        return str(e)
    raise AssertionError("no TypeError")


# (kiln call, torch call): the same wrong call in both; the messages must be equal.
WRONG_CALLS = [
    ("kiln.sin('a')", "torch.sin('a')"),
    ("kiln.sin()", "torch.sin()"),
    ("kiln.sin(kx, 1)", "torch.sin(tx, 1)"),
    ("kiln.sin(kx, foo=1)", "torch.sin(tx, foo=1)"),
    ("kiln.add(kx, 'a')", "torch.add(tx, 'a')"),
    ("kx.add('a')", "tx.add('a')"),
    ("kiln.add(kx, kx, 2)", "torch.add(tx, tx, 2)"),
    ("kx.add(kx, 1)", "tx.add(tx, 1)"),
    ("kiln.add(kx, kx, input=kx)", "torch.add(tx, tx, input=tx)"),
    ("F.relu('a')", "torch.nn.functional.relu('a')"),
    ("F.gelu(kx, approximate=1)", "torch.nn.functional.gelu(tx, approximate=1)"),
    ("kiln.atan2(kx, [1])", "torch.atan2(tx, [1])"),
    ("F.linear('a', kx)", "torch.nn.functional.linear('a', tx)"),
    ("F.layer_norm(kx, 2)", "torch.nn.functional.layer_norm(tx, 2)"),
    ("kiln.matmul(kx)", "torch.matmul(tx)"),
    # views, joins and splits
    ("kiln.unsqueeze(kx)", "torch.unsqueeze(tx)"),
    ("kiln.unsqueeze(kx, 'a')", "torch.unsqueeze(tx, 'a')"),
    ("kx.unsqueeze(1.5)", "tx.unsqueeze(1.5)"),
    ("kiln.cat(kx)", "torch.cat(tx)"),
    ("kiln.cat([kx], 'a')", "torch.cat([tx], 'a')"),
    ("kiln.stack('a')", "torch.stack('a')"),
    ("kx.chunk('a')", "tx.chunk('a')"),
    ("kiln.diag(kx, 'a')", "torch.diag(tx, 'a')"),
    ("kiln.diag_embed(kx, 1.5)", "torch.diag_embed(tx, 1.5)"),
    ("kx.tile('a')", "tx.tile('a')"),
    ("kiln.t(kx, 1)", "torch.t(tx, 1)"),
    ("kiln.fliplr('a')", "torch.fliplr('a')"),
    ("kiln.select(kx, 0)", "torch.select(tx, 0)"),
    ("kx.permute('a')", "tx.permute('a')"),
    ("kx.expand('a')", "tx.expand('a')"),
    ("kiln.broadcast_to(kx, 'a')", "torch.broadcast_to(tx, 'a')"),
    ("kx.unflatten('a', (1, 2))", "tx.unflatten('a', (1, 2))"),
    ("kiln.unbind(kx, 'a')", "torch.unbind(tx, 'a')"),
    ("kx.diagonal('a')", "tx.diagonal('a')"),
    ("kiln.swapaxes(kx, 0)", "torch.swapaxes(tx, 0)"),
    ("kx.transpose(0)", "tx.transpose(0)"),
    ("kx.flatten('a')", "tx.flatten('a')"),
    ("kiln.split_with_sizes(kx, 'a')", "torch.split_with_sizes(tx, 'a')"),
    ("kx.view_as(1)", "tx.view_as(1)"),
    ("kx.expand_as('a')", "tx.expand_as('a')"),
    ("kx.reshape_as()", "tx.reshape_as()"),
    # reductions, scans and sorting
    ("kx.topk('a')", "tx.topk('a')"),
    ("kiln.topk(kx)", "torch.topk(tx)"),
    ("kx.kthvalue(1, 'a')", "tx.kthvalue(1, 'a')"),
    ("kiln.nansum(kx, 'a')", "torch.nansum(tx, 'a')"),
    ("kx.aminmax(1)", "tx.aminmax(1)"),
    ("kx.cummax()", "tx.cummax()"),
    ("kiln.cummin(kx, 1.5)", "torch.cummin(tx, 1.5)"),
    ("kiln.msort('a')", "torch.msort('a')"),
    ("kx.mode('a')", "tx.mode('a')"),
    # products and convolutions: a number does not stand for a tensor there
    ("kiln.mm(kx, 'a')", "torch.mm(tx, 'a')"),
    ("kx.bmm(1)", "tx.bmm(1)"),
    ("kiln.mv(kx, 'a')", "torch.mv(tx, 'a')"),
    ("kiln.dot(kx, 1)", "torch.dot(tx, 1)"),
    ("kiln.outer(kx)", "torch.outer(tx)"),
    ("kiln.matmul(kx, 2)", "torch.matmul(tx, 2)"),
    ("F.linear(kx, 2)", "torch.nn.functional.linear(tx, 2)"),
    ("kiln.conv_transpose2d(kx)", "torch.conv_transpose2d(tx)"),
    ("kiln.bilinear(kx, kx)", "torch.bilinear(tx, tx)"),
    # indexing
    ("kiln.masked_select(kx, 1)", "torch.masked_select(tx, 1)"),
    ("kx.take('a')", "tx.take('a')"),
    ("kiln.nonzero(kx, True)", "torch.nonzero(tx, True)"),
    ("kiln.argwhere('a')", "torch.argwhere('a')"),
    # sampling
    ("kiln.multinomial(kx, 'a')", "torch.multinomial(tx, 'a')"),
    ("kx.multinomial()", "tx.multinomial()"),
]


@pytest.mark.parametrize("kiln_call,torch_call", WRONG_CALLS, ids=[k for k, _ in WRONG_CALLS])
def test_argument_errors_are_torchs(kiln_call, torch_call):
    env = {"kiln": kiln, "torch": torch, "F": F, "kx": kiln.ones(2), "tx": torch.ones(2)}
    assert _error(lambda: eval(kiln_call, env)) == _error(lambda: eval(torch_call, env))


def test_argument_errors_name_each_kind():
    x = kiln.ones(3)
    assert _error(lambda: kiln.clamp(x, "a")) == (
        "clamp(): argument 'min' (position 2) must be Number, not str")
    assert _error(lambda: kiln.round(x, decimals=1.5)) == (
        "round(): argument 'decimals' must be int, not float")
    assert _error(lambda: F.relu(x, inplace=1)) == (
        "relu(): argument 'inplace' must be bool, not int")
    assert _error(lambda: kiln.nan_to_num(x, nan="a")) == (
        "nan_to_num(): argument 'nan' must be float, not str")
    assert _error(lambda: kiln.add(x, x, alpha="a")) == (
        "add(): argument 'alpha' must be Number, not str")
    assert _error(lambda: kiln.sin(x, out=3)) == "sin(): argument 'out' must be Tensor, not int"


def _rows_with_kernels():
    """Every table spelling bound from the table: kiln.X, kiln.Tensor.X, kiln.nn.functional.X."""
    for s in op_table.spellings():
        if s.path.startswith(("operator.", "builtins.")):
            continue
        module, _, name = s.path.rpartition(".")
        owner = {"kiln": kiln, "kiln.Tensor": kiln.Tensor, "kiln.nn.functional": F}[module]
        fn = getattr(owner, name, None)
        if fn is not None and type(fn).__name__ in ("builtin_function_or_method",
                                                     "method_descriptor"):
            yield s.path, fn


def test_generated_callables_are_builtins_with_the_schema_signature():
    seen = dict(_rows_with_kernels())
    for path in ("kiln.sin", "kiln.Tensor.add_", "kiln.Tensor.__radd__", "kiln.nn.functional.relu",
                 "kiln.clamp", "kiln.Tensor.__invert__", "kiln.nn.functional.hardtanh"):
        assert path in seen, path
    assert str(inspect.signature(kiln.add)) == "(input, other, *, alpha=1, out=None)"
    assert str(inspect.signature(kiln.Tensor.clamp)) == "(self, /, min=None, max=None)"
    assert str(inspect.signature(F.leaky_relu)) == "(input, negative_slope=0.01, inplace=False)"
    assert type(kiln.Tensor.add).__name__ == "method_descriptor"
    assert kiln.sin.__module__ == "kiln._C"
    assert "sin(Tensor input) -> Tensor" in kiln.sin.__doc__


def test_operators_inplace_and_reflected_forms():
    a = np.array([1.0, -2.0, 3.0], np.float32)
    x = kiln.tensor(a)
    np.testing.assert_array_equal((2 - x).numpy(), 2 - a)
    np.testing.assert_array_equal((2 ** x).numpy(), 2 ** a)
    np.testing.assert_array_equal((x.__rtruediv__(4)).numpy(), 4 / a)
    y = x.clone()
    alias = y
    y += 1
    assert y is alias
    np.testing.assert_array_equal(y.numpy(), a + 1)
    np.testing.assert_array_equal(x.numpy(), a)  # untouched
    i = kiln.tensor(np.array([1, -6, 3]))
    np.testing.assert_array_equal((~i).numpy(), ~np.array([1, -6, 3]))
    np.testing.assert_array_equal(i.numpy(), [1, -6, 3])  # ~ is not in place
    with pytest.raises(TypeError, match="only implemented on integer and bool tensors"):
        operator.invert(x)
    assert (x == None) is False  # noqa: E711 - the operand is not a tensor: NotImplemented
    with pytest.raises(TypeError, match="unsupported operand"):
        x + "a"
    assert x.__add__("a") is NotImplemented
    assert x.add_(1) is x
    np.testing.assert_array_equal(x.numpy(), a + 1)


def test_spelling_forms_come_from_one_rule():
    """The eager bindings and the capture read a spelling's in-place and reflected form from
    the same C++ rule (ir::spellingForm), exported per spelling by op_table()."""
    from kiln._capture import op_table

    forms = {}
    for row in kiln._C._ir.op_table():
        assert set(row["forms"]) == set(row["spellings"].split())
        forms.update(row["forms"])
    expected = {
        "Tensor.__iadd__": (True, False), "Tensor.__radd__": (False, True),
        "Tensor.__add__": (False, False), "Tensor.__invert__": (False, False),
        "operator.iadd": (True, False),
        "operator.iand": (True, False), "operator.and_": (False, False),
        "operator.invert": (False, False), "Tensor.add_": (True, False), "add": (False, False),
    }  # fmt: skip
    for spelling, form in expected.items():
        assert forms.get(spelling) == form, spelling
    for s in op_table.spellings():
        name = s.path.rpartition(".")[2]
        if name.startswith("__") and not name.startswith(("__i", "__r")):
            assert not s.inplace and not s.reflected, s.path
        if s.path.startswith("kiln.") and not name.startswith("__") and name.endswith("_"):
            assert s.inplace and not s.reflected, s.path


def test_out_and_inplace_flag():
    a = np.linspace(-2, 2, 6, dtype=np.float32)
    x, out = kiln.tensor(a), kiln.empty(6)
    assert kiln.sin(x, out=out) is out
    np.testing.assert_allclose(out.numpy(), np.sin(a), rtol=1e-6)
    assert kiln.add(x, 1, out=out, alpha=2) is out
    np.testing.assert_allclose(out.numpy(), a + 2)
    v = x.clone()
    assert F.relu(v, inplace=True) is v
    np.testing.assert_array_equal(v.numpy(), np.maximum(a, 0))
    w = x.clone()
    r = F.hardtanh(w, -0.5, 0.5)
    assert r is not w
    np.testing.assert_array_equal(w.numpy(), a)
    assert F.hardtanh_(w, -0.5, 0.5) is w
    np.testing.assert_array_equal(w.numpy(), np.clip(a, -0.5, 0.5))


def test_inplace_keeps_autograd_rules():
    leaf = kiln.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.add_(1)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        F.relu(leaf, inplace=True)
    h = leaf * 2
    h.mul_(3)
    h.sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), [6.0, 6.0, 6.0])


def test_numbers_and_numpy_scalars_as_operands():
    x = kiln.tensor(np.array([1.0, 2.0], np.float32))
    assert kiln.add(2, x).tolist() == [3.0, 4.0]
    assert kiln.mul(x, np.float32(2)).tolist() == [2.0, 4.0]
    assert kiln.where(x > 1, x, 0.0).tolist() == [0.0, 2.0]
    assert kiln.clamp(x, min=kiln.tensor(1.5)).tolist() == [1.5, 2.0]
    assert operator.pow(x, 2).tolist() == [1.0, 4.0]
    with pytest.raises(TypeError, match=r"sin\(\): argument 'input' \(position 1\) must be Tensor"):
        kiln.sin(2.0)


def test_reduction_rows_bind_their_schemas():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = kiln.tensor(a)
    np.testing.assert_array_equal(x.sum(0).numpy(), a.sum(0))
    np.testing.assert_array_equal(kiln.sum(x, (0, 1)).numpy(), a.sum())
    np.testing.assert_array_equal(x.sum(1, True).numpy(), a.sum(1, keepdims=True))
    assert x.sum(dtype=kiln.float64).dtype == kiln.float64
    np.testing.assert_array_equal(x.amax().numpy(), a.max())  # dim=[]: every dim
    assert x.argmax(dim=1).tolist() == [2, 2]
    assert x.cumsum(1).tolist() == np.cumsum(a, 1).tolist()
    assert _error(lambda: x.sum(0, 1)) == (
        "sum(): argument 'keepdim' (position 2) must be bool, not int")
    assert _error(lambda: x.argmax(dim=(0,))) == "argmax(): argument 'dim' must be int, not tuple"
    assert _error(lambda: x.cumsum()) == 'cumsum() missing 1 required positional arguments: "dim"'


def test_functional_softmax_implicit_dim_warns_at_the_callers_line():
    x = kiln.ones(2, 3)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax") as record:
        y = F.softmax(x)
    assert record[0].filename == __file__
    np.testing.assert_allclose(y.numpy(), np.full((2, 3), 1 / 3), rtol=1e-6)  # dim 1 for 2-D
    np.testing.assert_allclose(F.log_softmax(x, 0).numpy(), np.full((2, 3), np.log(0.5)),
                               rtol=1e-6)


def test_int_list_varargs_as_torch():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x, t = kiln.tensor(a), torch.tensor(a)
    for call in ("x.repeat(2, 3)", "x.repeat((2, 3))", "x.repeat(repeats=[2, 1])", "x.flip(0, 1)",
                 "x.flip(1)", "kiln.flip(x, [0])", "x.roll(1, None)", "x.roll((1, 1), (0, 1))"):
        ours = eval(call, {"x": x, "kiln": kiln})
        theirs = eval(call.replace("kiln.", "torch."), {"x": t, "torch": torch})
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=call)
    env = {"kiln": kiln, "torch": torch, "kx": x, "tx": t}
    assert _error(lambda: eval("kiln.flip(kx, 0, 1)", env)) == _error(
        lambda: eval("torch.flip(tx, 0, 1)", env))
    for call in ('kx.repeat(2, "a")', 'kiln.sum(kx, dim=(0, "a"))', "kx.flip([0, 1.5])"):
        torch_call = call.replace("kx", "tx").replace("kiln.", "torch.")
        assert _error(lambda: eval(call, env)) == _error(lambda: eval(torch_call, env))


def test_losses_bind_torchs_legacy_flags():
    a = np.array([[0.5, 1.5], [2.0, -1.0]], np.float32)
    b = np.array([[1.0, 1.0], [0.0, 0.0]], np.float32)
    x, y = kiln.tensor(a), kiln.tensor(b)
    tx, ty = torch.tensor(a), torch.tensor(b)
    for kw in ({}, {"reduction": "sum"}, {"reduction": "none"}):
        np.testing.assert_allclose(F.mse_loss(x, y, **kw).numpy(),
                                   torch.nn.functional.mse_loss(tx, ty, **kw).numpy())
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        r = F.l1_loss(x, y, size_average=False)
    assert r.item() == pytest.approx(torch.nn.functional.l1_loss(tx, ty, reduction="sum").item())
    with pytest.warns(UserWarning, match=r"target size \(kiln.Size\(\[2\]\)\) that is different"):
        F.mse_loss(x, y[0])
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):
        F.mse_loss(x, y, reduction="avg")
    logits = kiln.tensor(a)
    target = kiln.tensor(np.array([1, 0]))
    for kw in ({}, {"label_smoothing": 0.1}, {"ignore_index": 0}):
        np.testing.assert_allclose(
            F.cross_entropy(logits, target, **kw).item(),
            torch.nn.functional.cross_entropy(tx, torch.tensor([1, 0]), **kw).item(), rtol=1e-6)
    assert F.one_hot(tensor=kiln.tensor(np.array([0, 2])), num_classes=3).tolist() == [
        [1, 0, 0], [0, 0, 1]]


def test_inplace_kernels_write_without_a_temporary_and_keep_autograd():
    x = kiln.zeros(2, 3)
    mask = kiln.tensor(np.array([[True, False, True], [False, False, True]]))
    assert x.masked_fill_(mask, 2.0) is x
    assert x.tolist() == [[2.0, 0.0, 2.0], [0.0, 0.0, 2.0]]
    idx = kiln.tensor(np.array([0, 0, 1]))
    z = kiln.zeros(2)
    assert z.index_add_(0, idx, kiln.ones(3), alpha=2) is z
    assert z.tolist() == [4.0, 2.0]
    w = kiln.ones(3, requires_grad=True)
    h = kiln.zeros(2).index_add_(0, idx, w * 3)  # the recorded path: gradients flow to w
    h.sum().backward()
    assert w.grad.tolist() == [3.0, 3.0, 3.0]


def test_every_row_with_a_kernel_is_what_its_spellings_call():
    """Every op-table row has an eager kernel (F.pad's eager form stays Python: its reflect,
    replicate and circular derivatives are composed of slices), and every spelling of a row
    names a callable bound from the table."""
    rows = kiln._C._ir.op_table()
    assert [r["schema"].split("(")[0] for r in rows if not r["eager_kernel"]] == ["pad"]
    bound = dict(_rows_with_kernels())
    for r in rows:
        if not r["eager_kernel"]:
            continue
        for spelling in r["spellings"].split():
            if spelling.startswith(("operator.", "builtins.")):
                continue
            path = op_table._path(spelling)
            assert path in bound, path


def test_overloaded_names_pick_torchs_overload():
    a = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], np.float32)
    x, t = kiln.tensor(a), torch.tensor(a)
    assert x.max().item() == 6.0
    values, indices = x.max(1)
    assert values.tolist() == [5.0, 6.0] and indices.tolist() == [1, 2]
    assert kiln.min(x, dim=0, keepdim=True).values.tolist() == [[1.0, 2.0, 3.0]]
    np.testing.assert_array_equal(x.max(kiln.full((3,), 3.0)).numpy(), np.maximum(a, 3))
    np.testing.assert_array_equal(kiln.where(x > 2, x, 0.0).numpy(), np.where(a > 2, a, 0))
    np.testing.assert_array_equal(x.where(x > 2, -1.0).numpy(), np.where(a > 2, a, -1))
    rows, cols = kiln.where(x > 2)
    assert rows.tolist() == [0, 0, 1, 1] and cols.tolist() == [1, 2, 0, 2]
    assert x.norm().item() == pytest.approx(t.norm().item())
    np.testing.assert_allclose(kiln.norm(x, 1, 1).numpy(), t.norm(1, 1).numpy())
    env = {"kiln": kiln, "torch": torch, "kx": x, "tx": t}
    for call in ("kx.max(1.5)", "kiln.min(kx, 'a')", "kiln.where(kx > 0, kx)",
                 "kx.scatter(0, kx.long())"):
        message = _error(lambda: eval(call, env))
        assert "received an invalid combination of arguments" in message, message
    with pytest.raises(NotImplementedError, match="nuclear norm"):
        x.norm("nuc")


def test_eager_only_rows_bind_like_table_rows():
    a = np.array([1.0, -2.0, 0.5], np.float32)
    x, t = kiln.tensor(a), torch.tensor(a)
    np.testing.assert_allclose(kiln.square(x).numpy(), a * a)
    out = kiln.empty(3)
    assert kiln.erfc(x, out=out) is out
    np.testing.assert_allclose(out.numpy(), torch.erfc(t).numpy(), rtol=1e-6)
    assert (+x).tolist() == x.tolist() and x.positive().tolist() == x.tolist()
    np.testing.assert_allclose(kiln.rsub(x, 2, alpha=3).numpy(), torch.rsub(t, 2, alpha=3).numpy())
    np.testing.assert_allclose(x.float_power(2).numpy(), t.float_power(2).numpy())
    assert kiln.equal(x, x.clone()) is True and kiln.allclose(x, x + 1e-9) is True
    assert x.isclose(x + 1).tolist() == [False, False, False]
    i = kiln.tensor(np.array([8, 16, 3]))
    assert (i >> 1).tolist() == [4, 8, 1] and (1 << i).tolist() == [256, 65536, 8]
    j = i.clone()
    j <<= 2
    assert j.tolist() == [32, 64, 12]
    message = "square() takes 1 positional argument but 2 were given"
    assert _error(lambda: kiln.square(x, 2)) == message


def test_view_and_reshape_rows():
    x = kiln.arange(6.0)
    assert x.view(2, 3).shape == (2, 3) and x.view((3, 2)).shape == (3, 2)
    assert x.view(-1, 2).shape == (3, 2) and x.view(size=(6,)).shape == (6,)
    assert x.view(kiln.int32).dtype == kiln.int32  # the dtype overload, not a size of 4
    assert kiln.reshape(x, (2, 3)).shape == (2, 3) and x.reshape(shape=[1, 6]).shape == (1, 6)
    y = x.view(2, 3)
    y[0, 0] = 7.0
    assert x[0].item() == 7.0  # a view shares storage
    w = kiln.ones(6, requires_grad=True)
    (w.view(2, 3) * 2).sum().backward()
    assert w.grad.tolist() == [2.0] * 6
    assert "received an invalid combination of arguments" in _error(lambda: x.view("a"))
    with pytest.raises(NotImplementedError, match="view\\(dtype\\) of a tensor that requires"):
        w.view(kiln.int32)


# Ops written in Python (kiln/_schema.py): a failing call is checked against torch's schema.
PYTHON_OP_CALLS = [
    ("F.batch_norm(kx, 'a', None)",
     "batch_norm(): argument 'running_mean' (position 2) must be Tensor, not str"),
    ("F.batch_norm(kx, None, None, eps='e')",
     "batch_norm(): argument 'eps' must be float, not str"),
    ("F.group_norm(kx, 'a')",
     "group_norm(): argument 'num_groups' (position 2) must be int, not str"),
    ("F.instance_norm(kx, 'a')",
     "instance_norm(): argument 'running_mean' (position 2) must be Tensor, not str"),
    ("F.embedding('a', kx)", "embedding(): argument 'input' (position 1) must be Tensor, not str"),
    ("F.scaled_dot_product_attention(kx, kx, 'a')",
     "scaled_dot_product_attention(): argument 'value' (position 3) must be Tensor, not str"),
    ("F.adaptive_avg_pool2d('a', 1)",
     "adaptive_avg_pool2d(): argument 'input' (position 1) must be Tensor, not str"),
    ("F.dropout(kx, 'a')", "dropout(): argument 'p' (position 2) must be float, not str"),
    ("F.normalize(kx, p='a')", "normalize(): argument 'p' must be float, not str"),
    ("F.cosine_similarity(kx, 'a')",
     "cosine_similarity(): argument 'x2' (position 2) must be Tensor, not str"),
    ("F.pairwise_distance(kx, 'a')",
     "pairwise_distance(): argument 'x2' (position 2) must be Tensor, not str"),
    ("kiln.cdist(kx, 'a')", "cdist(): argument 'x2' (position 2) must be Tensor, not str"),
    ("kiln.tensordot(kx, 'a')", "tensordot(): argument 'b' (position 2) must be Tensor, not str"),
    ("F.smooth_l1_loss(kx, 'a')",
     "smooth_l1_loss(): argument 'target' (position 2) must be Tensor, not str"),
    ("F.huber_loss(kx, 1)", "huber_loss(): argument 'target' (position 2) must be Tensor, not int"),
    ("F.kl_div(kx, 'a')", "kl_div(): argument 'target' (position 2) must be Tensor, not str"),
    ("F.triplet_margin_loss(kx, kx, 'a')",
     "triplet_margin_loss(): argument 'negative' (position 3) must be Tensor, not str"),
    ("F.poisson_nll_loss(kx, 'a')",
     "poisson_nll_loss(): argument 'target' (position 2) must be Tensor, not str"),
]


@pytest.mark.parametrize("call,message", PYTHON_OP_CALLS, ids=[c for c, _ in PYTHON_OP_CALLS])
def test_python_ops_refuse_wrong_calls_in_torchs_words(call, message):
    env = {"F": F, "kiln": kiln, "kx": kiln.ones(2, 3, 4, 4)}
    assert _error(lambda: eval(call, env)) == message


def test_python_ops_keep_their_own_errors_for_calls_that_fit():
    x = kiln.ones(2, 3, 4, 4)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(x, 2)  # fits the schema: the op's own error
    with pytest.raises(ValueError, match="dropout probability"):
        F.dropout(x, 1.5)
    assert F.group_norm(x, 3).shape == (2, 3, 4, 4)
    assert F.batch_norm.__name__ == "batch_norm" and "running_mean" in str(
        inspect.signature(F.batch_norm))


def test_warnings_of_ops_written_in_python_name_the_callers_line():
    """kiln/_schema.py's user_stacklevel: however many kiln frames (a torch_schema wrapper, a
    shared helper) lie between, the warning points at the line that called the op."""
    x = kiln.randn(2, 3)
    calls = [lambda: F.smooth_l1_loss(x, x, size_average=True),
             lambda: F.kl_div(x, x),
             lambda: F.soft_margin_loss(x, x, reduce=False),
             lambda: F.mse_loss(x, kiln.randn(3))]  # fmt: skip
    for call in calls:
        with pytest.warns(UserWarning) as record:
            call()
        assert {w.filename for w in record} == {__file__}, [w.filename for w in record]
