"""Recording tensor operations: arguments to graph form, example results, result variables.

Every captured op runs once on example values at capture time, which gives the result's dtype
and shape (and surfaces the op's own errors as graph breaks, so eager raises them at run time
with the user's traceback). In-place ops run on a clone of the example, never on the caller's
tensors.
"""

from __future__ import annotations

import operator

import kiln
from kiln import _C
from kiln._capture import variables as V
from kiln._capture.data_dependent import check_size_read
from kiln._capture.graph import MUTATING_DUNDERS, inplace_flag

_INPLACE_OPERATORS = {
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
    operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift,
    operator.irshift, operator.imatmul,
}
# Tensor methods whose result is a Python value read from the data: a graph break.
DATA_DEPENDENT_METHODS = {
    "item": "Tensor.item() reads a value from the tensor's data",
    "tolist": "Tensor.tolist() reads the tensor's data into Python",
    "numpy": "Tensor.numpy() hands the data to NumPy",
    "__bool__": "bool() of a tensor depends on its data",
    "__int__": "int() of a tensor depends on its data",
    "__float__": "float() of a tensor depends on its data",
    "__index__": "using a tensor as a Python index depends on its data",
    "__len__": None,
    "data_ptr": "Tensor.data_ptr() is an address only known at run time",
    "__array__": "converting a tensor to a NumPy array",
    "__dlpack__": "exporting a tensor through DLPack",
    "backward": "autograd is not captured",
    "nonzero": "nonzero() has a data-dependent output shape",
    "unique": "unique() has a data-dependent output shape",
    "equal": "Tensor.equal() returns a Python bool computed from data",
    "allclose": "Tensor.allclose() returns a Python bool computed from data",
}
# (masked_select is recorded, a node of data-dependent size as x[mask] is: a reduction of it
# compiles, masked_select.py.)
DATA_DEPENDENT_FUNCTIONS = {"nonzero", "unique", "equal", "allclose",
                            "unique_consecutive", "argwhere", "tolist", "item", "numpy",
                            "from_numpy", "tensor", "as_tensor", "asarray"}


# kiln.compiler.allow_in_graph's functions: id -> (function, what the node calls); the function
# is kept alive, so the id stays valid
ALLOWED_IN_GRAPH: dict = {}


def allowed_in_graph(fn):
    """The callable a node for `fn` runs (`fn` without capture), or None if not allowed."""
    entry = ALLOWED_IN_GRAPH.get(id(fn))
    return entry[1] if entry is not None and entry[0] is fn else None


# Functions that update some tensor arguments in place (running statistics): at capture time
# they run on clones of every tensor argument, so the caller's buffers change once, at run time.
MUTATES_ARGUMENTS = {"batch_norm", "instance_norm"}


def is_inplace(target, name: str, kwargs: dict, args=()) -> bool:
    """Whether a call mutates its first operand: its example must then run on a clone, so the
    caller's tensor changes once, at run time."""
    if any(target is op for op in _INPLACE_OPERATORS) or target is operator.setitem:
        return True
    if "out" in kwargs or name in MUTATING_DUNDERS:  # out=, x.__iadd__(y)
        return True
    if inplace_flag(target, args, kwargs):  # F.relu(x, inplace=True), F.relu(x, True)
        return True
    return name.endswith("_") and not name.endswith("__")


def to_example(value):
    """The capture-time value standing for a variable (tensors: their example)."""
    if isinstance(value, V.TensorVar):
        return value.example
    if isinstance(value, V.SymIntVar):
        return value.hint
    if isinstance(value, V.ConstVar):
        return value.value
    if isinstance(value, V.ListVar):
        return [to_example(v) for v in value.items]
    if isinstance(value, V.TupleVar):
        items = [to_example(v) for v in value.items]
        if value.tuple_type is tuple or not hasattr(value.tuple_type, "_fields"):
            return value.tuple_type(items)  # tuple, kiln.Size: built from one iterable
        return value.tuple_type(*items)
    if isinstance(value, V.DictVar):
        return {k: to_example(v) for k, v in value.items.items()}
    if isinstance(value, V.SliceVar):
        return slice(to_example(value.start), to_example(value.stop), to_example(value.step))
    if isinstance(value, (V.ObjectVar, V.FunctionVar)):
        return value.value if isinstance(value, V.ObjectVar) else value.fn
    if isinstance(value, V.ModuleVar):
        return value.module
    raise V.Unsupported(f"{type(value).__name__} as an argument of a tensor op")


def to_graph_arg(value):
    """The graph-node form of an argument: nodes for tensors and symbolic ints."""
    if isinstance(value, (V.TensorVar, V.SymIntVar)):
        return value.node
    if isinstance(value, V.ConstVar):
        return value.value
    if isinstance(value, V.ListVar):
        return [to_graph_arg(v) for v in value.items]
    if isinstance(value, V.TupleVar):
        items = tuple(to_graph_arg(v) for v in value.items)
        if value.tuple_type is kiln.Size and all(type(i) is int for i in items):
            return kiln.Size(items)  # a Size is sizes where a tuple may be data (FloatTensor(s))
        if value.tuple_type is tuple or not hasattr(value.tuple_type, "_fields"):
            return items
        # A namedtuple (PackedSequence) keeps its type; made as tuple.__new__ makes it, since
        # its class's __new__ may check the values, which are graph nodes here.
        return tuple.__new__(value.tuple_type, items)
    if isinstance(value, V.DictVar):
        return {k: to_graph_arg(v) for k, v in value.items.items()}
    if isinstance(value, V.SliceVar):
        # A bound may be a run-time int (`mask[:, :, :T, :T]` with T = x.size(1) symbolic):
        # the node stays in the slice, as the graph's code and its .kir `slice` op take it.
        parts = [to_graph_arg(value.start), to_graph_arg(value.stop), to_graph_arg(value.step)]
        if any(not isinstance(p, (int, type(None))) and not _is_int_node(p) for p in parts):
            raise V.Unsupported("a slice with non-integer bounds")
        return slice(*parts)
    if isinstance(value, V.ObjectVar) and isinstance(value.value, (kiln.dtype, kiln.device)):
        return value.value
    if isinstance(value, V.ObjectVar) and isinstance(value.value, kiln.Generator):
        raise V.Unsupported("a draw from an explicit kiln.Generator runs eagerly (compiled "
                            "draws take the default generator's counters)",
                            "draw from the default generator, or outside the compiled function")
    raise V.Unsupported(f"{type(value).__name__} as an argument of a tensor op")


def _is_int_node(p) -> bool:
    return type(getattr(p, "meta", {}).get("example")) is int


def target_name(target) -> str:
    return getattr(target, "__name__", type(target).__name__)


def record(ctx, target, args: list, kwargs: dict, name: str | None = None) -> V.VT:
    """Records `target(*args, **kwargs)` in the graph and returns the result's variable."""
    name = name or target_name(target)
    if target is kiln.Tensor.requires_grad_:
        return _set_requires_grad(ctx, args, kwargs)
    if "out" in kwargs:
        return _record_into(ctx, target, args, kwargs, name)
    if ctx.autocast:
        args, kwargs = _autocast_operands(ctx, name, args, kwargs)
    ex_args = [to_example(a) for a in args]
    ex_kwargs = {k: to_example(v) for k, v in kwargs.items()}
    inplace = is_inplace(target, name, ex_kwargs, ex_args)
    if name in MUTATES_ARGUMENTS:
        ex_args = [a.clone() if isinstance(a, kiln.Tensor) else a for a in ex_args]
        ex_kwargs = {k: v.clone() if isinstance(v, kiln.Tensor) else v
                     for k, v in ex_kwargs.items()}
    if inplace:
        ex_args, ex_kwargs, mutated = _clone_mutated(target, name, args, ex_args, ex_kwargs)
    # Before the example runs: an argument the graph cannot hold breaks the graph here, and
    # the call then runs eagerly once, not after its example already had its effect.
    graph_args = tuple(to_graph_arg(a) for a in args)
    graph_kwargs = {k: to_graph_arg(v) for k, v in kwargs.items()}
    try:
        # The example runs in the grad mode the code runs it in (a no_grad block inside the
        # captured code included), so its requires_grad is what eager's would be.
        # A generator the call draws from is put back afterwards (the default one is after the
        # whole capture), so the draws the program makes when it runs are eager's.
        generators = [(g, g.get_state()) for g in (*ex_args, *ex_kwargs.values())
                      if isinstance(g, kiln.Generator)]
        with kiln.set_grad_enabled(ctx.grad_enabled):
            example = target(*ex_args, **ex_kwargs)
        for g, state in generators:
            g.set_state(state)
    except Exception as e:  # the op itself rejects its inputs: eager will raise it
        raise V.Unsupported(f"{name}() raised {type(e).__name__}: {e}") from None
    node = ctx.graph.call(target, graph_args, graph_kwargs, example, loc=ctx.loc)
    node.meta["grad_enabled"] = ctx.grad_enabled
    if ctx.autocast != ctx.entry_autocast:  # a block the code opened
        node.meta["autocast_block"] = dict(ctx.autocast)
    if inplace:
        for var, clone in mutated:
            var.example = clone
        if target is operator.setitem:
            return V.ConstVar(None)
        if isinstance(example, kiln.Tensor) and mutated and example is mutated[0][1]:
            return mutated[0][0]  # in-place ops return their target
    result = wrap_result(ctx, node, example, name)
    if isinstance(example, (tuple, list)) and name.rsplit(".", 1)[-1] in _SPLITS:
        _guard_piece_count(ctx, args, example)  # after the pieces' getitem nodes: sizes see them
    return result


def _record_into(ctx, target, args: list, kwargs: dict, name: str) -> V.VT:
    """``f(..., out=t)``: the call's value, then copied into ``t`` in place (a ``copy_`` node,
    which functionalization writes back as any mutation), and ``t`` is the result, as eager's
    ``out=`` returns it (spectral norm's power iteration: ``normalize(W @ v, out=u)``). An
    ``out`` of another shape or dtype than the value (eager would resize or reject it), or a
    tuple of them, is not captured."""
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    out = kwargs["out"]
    if isinstance(out, V.ConstVar) and out.value is None:
        return record(ctx, target, args, rest, name)
    if not isinstance(out, V.TensorVar):
        raise V.Unsupported(f"{name}(out=...) with an out that is not one tensor")
    value = record(ctx, target, args, rest, name)
    ex, want = getattr(value, "example", None), out.example
    if not isinstance(ex, kiln.Tensor) or ex.shape != want.shape or ex.dtype != want.dtype:
        raise V.Unsupported(f"{name}(out=...) with an out of another shape or dtype than the "
                            "result (eager resizes or rejects it)")
    return record(ctx, kiln.Tensor.copy_, [out, value], {}, "copy_")


def _set_requires_grad(ctx, args: list, kwargs: dict) -> V.VT:
    """``x.requires_grad_(flag)``: a node whose example carries the flag, with x's variable
    moved onto it, so what reads x afterwards sees its flag (a training part differentiates the
    inputs whose examples require grad: a gradient penalty's ``autograd.grad(out, x)``)."""
    var = args[0]
    flag = args[1] if len(args) > 1 else kwargs.get("requires_grad", V.ConstVar(True))
    if not isinstance(var, V.TensorVar) or not isinstance(flag, V.ConstVar):
        raise V.Unsupported("requires_grad_() of a value the capture does not know")
    ex = var.example
    try:  # eager's errors: an integer tensor, a flag cleared on a non-leaf
        example = ex.detach().requires_grad_(bool(flag.value))
        if not flag.value and ex.requires_grad and not ex.is_leaf:
            ex.clone().requires_grad_(False)
    except RuntimeError as e:
        raise V.Unsupported(f"requires_grad_() raised RuntimeError: {e}") from None
    node = ctx.graph.call(kiln.Tensor.requires_grad_, (var.node, bool(flag.value)), {}, example,
                          loc=ctx.loc)
    node.meta["grad_enabled"] = ctx.grad_enabled
    var.node, var.example = node, example
    return var


_AUTOCAST_NAMES = {"__matmul__": "matmul", "__rmatmul__": "matmul"}


def _autocast_operands(ctx, name: str, args: list, kwargs: dict):
    """The operands of an op on autocast's lists as an enabled region casts them (eager does it
    where the op starts, autograd/autocast.h): cast nodes in front of the op, so the compiled
    graph computes in the dtypes eager does. The op lists are C++'s, asked by op name."""
    key = name.rsplit(".", 1)[-1]
    policy = _C._autograd._autocast_policy(_AUTOCAST_NAMES.get(key, key))
    if not policy:
        return args, kwargs

    def cast(v):
        if isinstance(v, (V.ListVar, V.TupleVar)):  # einsum's operand list
            items = [cast(i) for i in v.items]
            return V.ListVar(items) if isinstance(v, V.ListVar) else V.TupleVar(
                items, None, v.tuple_type)
        if not isinstance(v, V.TensorVar) or not v.example.is_floating_point():
            return v
        device = v.example.device.type
        dtype = ctx.autocast.get(device)
        if dtype is None or (policy.endswith("_cuda") and device != "cuda"):
            return v
        if policy in ("lower", "lower_cuda"):
            if v.example.dtype in (kiln.float64, dtype):
                return v
            return record(ctx, kiln.Tensor.to, [v, V.ObjectVar(dtype)], {}, "to")
        if v.example.dtype not in (kiln.float16, kiln.bfloat16):
            return v
        return record(ctx, kiln.Tensor.to, [v, V.ObjectVar(kiln.float32)], {}, "to")

    return [cast(a) for a in args], {k: cast(v) for k, v in kwargs.items()}


# Ops whose number of pieces follows a size (max(x, d, keepdim=True) or topk return two pieces
# whatever the sizes are).
_SPLITS = frozenset(("split", "chunk", "tensor_split", "split_with_sizes", "unbind", "hsplit",
                     "vsplit", "dsplit", "array_split", "unsafe_split", "unsafe_chunk"))


def _guard_piece_count(ctx, args, pieces) -> None:
    """A split's pieces (split, chunk, tensor_split) are as many as its size along the split dim
    makes them, and the program unpacks that many: a symbolic size there is guarded to its value,
    so another size captures again instead of unpacking the wrong number of pieces."""
    t = next((a for a in args if isinstance(a, V.TensorVar)), None)
    if t is not None:
        check_size_read(t.node, "the number of pieces of a split")
    if t is None or not ctx.has_symbols:
        return
    ex = t.example
    if not all(isinstance(p, kiln.Tensor) and p.dim() == ex.dim() for p in pieces):
        return
    for d in range(ex.dim()):
        if all(p.shape[d] == ex.shape[d] for p in pieces):
            continue
        size = ctx.size_of(t, d)
        if isinstance(size, V.ConstVar):
            continue
        if size.sym is None:
            raise V.RestartStatic()
        ctx.guards.sym("eq_const", size.sym, size.hint,
                       f"{ctx.symbols[size.sym][0]} == {size.hint} (the pieces of a split)")


def _clone_mutated(target, name, args, ex_args, ex_kwargs):
    mutated = []
    if "out" in ex_kwargs:
        out_var = None
        raise V.Unsupported(f"{name}(out=...) is not captured") if out_var is None else None
    if args and isinstance(args[0], V.TensorVar):
        clone = ex_args[0].clone()
        ex_args = [clone] + ex_args[1:]
        mutated.append((args[0], clone))
    return ex_args, ex_kwargs, mutated


def wrap_result(ctx, node, example, name: str) -> V.VT:
    if isinstance(example, kiln.Tensor):
        return V.TensorVar(node, example)
    if isinstance(example, (tuple, list)) and all(isinstance(e, kiln.Tensor) for e in example):
        items = []
        for i, e in enumerate(example):
            item = ctx.graph.call(operator.getitem, (node, i), {}, e, loc=ctx.loc)
            items.append(V.TensorVar(item, e))
        if isinstance(example, list):
            return V.ListVar(items)
        return V.TupleVar(items, None, type(example))
    raise V.Unsupported(
        f"{name}() returns a Python {type(example).__name__} computed from tensor data"
    )
