"""The captured graph: what the symbolic evaluator records, and its executable Python form.

A `Graph` is a list of `Node`s in program order: ``placeholder`` nodes (the graph inputs, always
first), ``call`` nodes (one Python call each: ``kiln.add``, ``kiln.Tensor.view``,
``operator.getitem``, ...) and one ``output`` node. Arguments are kept as the Python values the
evaluator saw, with `Node`s where a value was computed in the graph, so running the graph means
calling each target with its arguments, in order. `compile_python()` does exactly that with one
generated Python function (no per-node interpretation), `python_source()` shows that function,
and `to_kir()` writes the graph as `.kir` text for the compiler layers (see graph_build.py).
"""

from __future__ import annotations

import builtins
import inspect
import itertools
import keyword
import linecache
import math
import operator
import os
import re

__all__ = ["Graph", "Node", "sym_size", "target_name"]


def sym_size(t, d):
    """``t.size(d)`` of a tensor whose dim `d` is dynamic (recorded as its own node)."""
    return t.size(d)


class Node:
    """One value of a captured graph: a graph input, one call, or the graph's outputs.

    ``users`` lists the nodes whose arguments mention this node (each user once, in the order
    they were added); the evaluator's examples and source locations live in ``meta``.
    """

    __slots__ = ("name", "op", "target", "args", "kwargs", "meta", "users", "graph")

    def __init__(self, graph, name, op, target, args, kwargs, meta):
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self.args = args
        self.kwargs = kwargs
        self.meta = meta
        self.users = []

    def __repr__(self) -> str:
        target = f" {target_name(self.target)}" if self.op == "call" else ""
        return f"Node({self.name}: {self.op}{target})"


def _map_nodes(value, fn):
    """Calls `fn` on every Node nested in tuples, lists, dicts and slices of `value`."""
    if isinstance(value, Node):
        fn(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _map_nodes(v, fn)
    elif isinstance(value, dict):
        for v in value.values():
            _map_nodes(v, fn)
    elif isinstance(value, slice):
        for v in (value.start, value.stop, value.step):
            _map_nodes(v, fn)


def is_namedtuple(value) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def replace_nodes(value, fn):
    """`value` with every Node nested in tuples, lists, dicts and slices replaced by fn(node)."""
    if isinstance(value, Node):
        return fn(value)
    if type(value) in (tuple, list):
        return type(value)(replace_nodes(v, fn) for v in value)
    if is_namedtuple(value):  # built as tuple.__new__ does: no __new__ checks on the nodes
        return tuple.__new__(type(value), [replace_nodes(v, fn) for v in value])
    if type(value) is dict:
        return {k: replace_nodes(v, fn) for k, v in value.items()}
    if type(value) is slice:
        return slice(replace_nodes(value.start, fn), replace_nodes(value.stop, fn),
                     replace_nodes(value.step, fn))
    return value


def nodes_in(value) -> list[Node]:
    """The distinct Nodes nested in `value`, in order of first appearance."""
    found: dict[int, Node] = {}
    _map_nodes(value, lambda n: found.setdefault(id(n), n))
    return list(found.values())


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def sanitize_name(name: str) -> str:
    """A Python identifier made from a user's name: ``self.fc1.weight`` -> ``self_fc1_weight``."""
    s = "_".join(p for p in re.split(r"[^A-Za-z0-9_]+", str(name)) if p) or "arg"
    if s[0].isdigit():
        s = "_" + s
    if keyword.iskeyword(s):
        s += "_"
    return s


# --- Stable names of targets ---------------------------------------------------------------------

_TARGET_NAMES: dict[int, str] = {}


def _build_target_names() -> None:
    import kiln
    import kiln.nn.functional as functional

    def scan(prefix, namespace, items):
        for attr, obj in items:
            if attr.startswith("__") and prefix != "kiln.Tensor":
                continue
            if callable(obj) and not isinstance(obj, type):
                _TARGET_NAMES.setdefault(id(obj), f"{prefix}.{attr}")

    scan("kiln", kiln, sorted(vars(kiln).items()))
    scan("kiln.nn.functional", functional, sorted(vars(functional).items()))
    tensor_attrs = [(a, getattr(kiln.Tensor, a, None)) for a in dir(kiln.Tensor)]
    scan("kiln.Tensor", kiln.Tensor, sorted(tensor_attrs))
    for module in (operator, math, builtins):
        scan(module.__name__, module, sorted(vars(module).items()))
    _TARGET_NAMES[id(sym_size)] = "kiln._capture.graph.sym_size"


def target_name(target) -> str:
    """A stable dotted name of a call target: ``kiln.add``, ``kiln.Tensor.view``,
    ``kiln.nn.functional.dropout``, ``operator.getitem``, ``math.sqrt``.

    kiln's public functions, ``kiln.nn.functional``, ``kiln.Tensor`` methods and the ``operator``,
    ``math`` and ``builtins`` modules are named where they are public; anything else by its
    ``__module__`` and ``__qualname__`` (never by an address, so the text is deterministic).
    """
    if not _TARGET_NAMES:
        _build_target_names()
    name = _TARGET_NAMES.get(id(target))
    if name is not None:
        return name
    qual = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if qual is None:
        return type(target).__qualname__
    module = getattr(target, "__module__", None)
    return f"{module}.{qual}" if module else qual


# --- Side effects --------------------------------------------------------------------------------

_RANDOM_OPS = frozenset(
    "dropout dropout1d dropout2d dropout3d alpha_dropout feature_alpha_dropout feature_dropout "
    "rand randn randint rand_like randn_like randint_like bernoulli normal multinomial randperm "
    "rrelu poisson uniform".split()
)
_EFFECT_OPS = frozenset(
    "print breakpoint input warn manual_seed seed set_rng_state set_default_dtype "
    "set_num_threads set_grad_enabled setattr delattr setitem delitem _assert "
    "kiln_loop".split()  # a loop node (loops.py) writes into arrays from outside the loop
)


_INPLACE_POSITION: dict = {}  # id(target) -> position of its `inplace` parameter, or None


def inplace_flag(target, args, kwargs) -> bool:
    """Whether a call passes ``inplace=True``, by keyword or by position (F.relu(x, True)); the
    position comes from the target's signature, looked up once per target."""
    if kwargs.get("inplace") is True:
        return True
    if len(args) < 2:
        return False
    key = id(target)
    if key not in _INPLACE_POSITION:
        position = None
        try:
            params = list(inspect.signature(target).parameters)
            position = params.index("inplace") if "inplace" in params else None
        except (TypeError, ValueError):
            pass
        _INPLACE_POSITION[key] = position
    k = _INPLACE_POSITION[key]
    return k is not None and k < len(args) and args[k] is True


def is_impure(node: Node) -> bool:
    """Whether a call node has effects beyond its result: it mutates (in-place methods ending in
    ``_``, ``operator.setitem``, in-place operators, ``out=``/``inplace=True``), draws random
    numbers, or prints or changes global state. `Graph.erase_unused` keeps such nodes."""
    if node.op != "call":
        return node.op == "output"
    if node.kwargs.get("out") is not None or inplace_flag(node.target, node.args, node.kwargs):
        return True
    name = target_name(node.target).rsplit(".", 1)[-1]
    if name.startswith("__") and name.endswith("__"):
        return name in MUTATING_DUNDERS
    if id(node.target) in _INPLACE_OPERATORS:
        return True
    if getattr(node.target, "__module__", None) in ("_operator", "operator"):
        return name in ("setitem", "delitem")  # `operator.and_` is pure, `iand` mutates
    return name.endswith("_") or name in _RANDOM_OPS or name in _EFFECT_OPS


_SAMPLERS_IN_PLACE = ("uniform_", "normal_", "exponential_", "bernoulli_", "random_", "cauchy_",
                      "geometric_", "log_normal_")  # fmt: skip


def draws_random(node: Node) -> bool:
    """Whether a call draws from a random generator (a sampler op, or an in-place one)."""
    name = target_name(node.target).rsplit(".", 1)[-1] if node.op == "call" else ""
    return name in _RANDOM_OPS or name.endswith(_SAMPLERS_IN_PLACE)


def has_effects(node: Node) -> bool:
    """Whether a call draws random numbers or prints or changes global state (an impurity that
    functionalization cannot remove, unlike mutation)."""
    if node.op != "call":
        return False
    name = target_name(node.target).rsplit(".", 1)[-1]
    if name == "setitem" and _writes_a_tensor(node):
        return False  # `x[i] = v` mutates x, which functionalization handles
    return name in _RANDOM_OPS or name in _EFFECT_OPS


def _writes_a_tensor(node: Node) -> bool:
    import kiln

    target = node.args[0] if node.args else None
    return isinstance(target, Node) and isinstance(target.meta.get("example"), kiln.Tensor)


_INPLACE_NAMES = "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift".split()
# By id: targets need not be hashable.
_INPLACE_OPERATORS = frozenset(id(getattr(operator, f"i{n}")) for n in _INPLACE_NAMES)
MUTATING_DUNDERS = frozenset(
    [f"__i{n}__" for n in _INPLACE_NAMES] + ["__setitem__", "__delitem__"]
)


class Graph:
    """A captured program: placeholders, calls and one output node, in program order."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: list[Node] = []
        self.outputs: list = []
        self._output_node: Node | None = None
        self._names: set[str] = set()
        self._call_counter = itertools.count()
        self._forward = None  # compile_python() of the graph as it is now (see `forward`)
        # The grad mode the graph is entered with (a guard of its entry); a call recorded under
        # another mode (a `with kiln.no_grad()` block) has it in meta["grad_enabled"].
        self.grad_enabled = True

    # -- building --------------------------------------------------------------------------------

    def _unique(self, base: str) -> str:
        name, k = base, 1
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        self._names.add(name)
        return name

    def _check_args(self, value) -> list[Node]:
        used = nodes_in(value)
        for n in used:
            if n.graph is not self or n.op == "output":
                raise ValueError(f"node {n.name} does not belong to graph {self.name!r}")
        return used

    def placeholder(self, name: str, example, sym_sizes=None) -> Node:
        """Adds a graph input named after `name` (sanitized, made unique), after the others."""
        meta = {"example": example, "loc": None}
        if sym_sizes is not None:
            meta["sym_sizes"] = list(sym_sizes)
        node = Node(self, self._unique(sanitize_name(name)), "placeholder", None, (), {}, meta)
        self._forward = None
        self.nodes.insert(len(self.inputs), node)
        self.inputs.append(node)
        return node

    def call(self, target, args: tuple, kwargs: dict, example, loc=None) -> Node:
        """Records ``target(*args, **kwargs)`` that evaluated to `example`; returns its node."""
        if self._output_node is not None:
            raise RuntimeError("graph outputs are already set: no calls can follow")
        node = self._new_call(target, args, kwargs, {"example": example, "loc": loc})
        self.nodes.append(node)
        return node

    def _new_call(self, target, args, kwargs, meta) -> Node:
        args, kwargs = tuple(args), dict(kwargs or {})
        used = self._check_args((args, kwargs))
        name = f"t{next(self._call_counter)}"
        while name in self._names:
            name = f"t{next(self._call_counter)}"
        self._names.add(name)
        node = Node(self, name, "call", target, args, kwargs, meta)
        for n in used:
            n.users.append(node)
        self._forward = None
        return node

    def insert_call(self, before: Node, target, args: tuple, kwargs: dict, example,
                    meta_from: Node) -> Node:
        """Records ``target(*args, **kwargs)`` right before `before` (a rewrite of the captured
        program); the new node takes `meta_from`'s source line and grad mode."""
        meta = {"example": example, "loc": meta_from.meta.get("loc")}
        if "grad_enabled" in meta_from.meta:
            meta["grad_enabled"] = meta_from.meta["grad_enabled"]
        node = self._new_call(target, args, kwargs, meta)
        self.nodes.insert(self.nodes.index(before), node)
        return node

    def set_call(self, node: Node, target, args: tuple, kwargs: dict, example) -> None:
        """Makes `node` the call ``target(*args, **kwargs)`` evaluating to `example`, keeping its
        name, users and source line (a rewrite of the captured program)."""
        for n in nodes_in((node.args, node.kwargs)):
            n.users.remove(node)
        node.target, node.args, node.kwargs = target, tuple(args), dict(kwargs)
        for n in self._check_args((node.args, node.kwargs)):
            n.users.append(node)
        node.meta["example"] = example
        node.meta.pop("sym_sizes", None)
        node.meta.pop("decline", None)
        self._forward = None

    def output(self, values: list) -> Node:
        """Sets the graph outputs (Nodes or constants); once."""
        if self._output_node is not None:
            raise RuntimeError("graph outputs are already set")
        values = list(values)
        used = self._check_args(values)
        node = Node(self, "output", "output", None, (values,), {}, {"loc": None})
        for n in used:
            n.users.append(node)
        self.outputs = values
        self._output_node = node
        self._forward = None
        self.nodes.append(node)
        return node

    # -- queries and cleanup ----------------------------------------------------------------------

    def op_count(self) -> int:
        """The number of call nodes."""
        return sum(1 for n in self.nodes if n.op == "call")

    def erase_unused(self) -> None:
        """Deletes call nodes nobody uses, unless they have side effects (see `is_impure`),
        repeating until nothing changes, so dead chains go whole."""
        changed = True
        while changed:
            changed = False
            for node in list(reversed(self.nodes)):
                if node.op == "call" and not node.users and not is_impure(node):
                    self._erase(node)
                    changed = True

    def _erase(self, node: Node) -> None:
        self._forward = None
        self.nodes.remove(node)
        for n in nodes_in((node.args, node.kwargs)):
            n.users.remove(node)
        node.graph = None

    # -- Python code ------------------------------------------------------------------------------

    def python_source(self) -> str:
        """The graph as the Python function `compile_python` runs (deterministic)."""
        return _PythonCodegen(self).source

    def compile_python(self):
        """A function ``f(*inputs)`` returning the tuple of output values, generated as Python
        source and exec'd with every target bound to a global, so calls cost what they would in
        hand-written code."""
        gen = _PythonCodegen(self)
        filename = f"<kiln-graph-{sanitize_name(self.name)}-{next(_GRAPH_IDS)}>"
        lines = gen.source.splitlines(keepends=True)
        linecache.cache[filename] = (len(gen.source), None, lines, filename)  # for tracebacks
        namespace = dict(gen.namespace)
        exec(compile(gen.source, filename, "exec"), namespace)  # noqa: S102 - our own code
        fn = namespace["forward"]
        fn.__kiln_source__ = gen.source
        return fn

    # -- torch's GraphModule contract: what a `backend(gm, example_inputs)` may use ------------

    @property
    def forward(self):
        """The graph as a function of its inputs returning the tuple of its outputs
        (`compile_python()`, generated once and again after the graph changes)."""
        fn = self._forward
        if fn is None:
            fn = self._forward = self.compile_python()
        return fn

    def __call__(self, *inputs):
        """Runs the graph on the eager kernels: ``backend=lambda gm, example_inputs: gm``."""
        return self.forward(*inputs)

    @property
    def graph(self) -> Graph:
        """The graph itself, for backends written against ``gm.graph.nodes``."""
        return self

    @property
    def code(self) -> str:
        """The Python source of `forward`."""
        return self.python_source()

    def print_readable(self, print_output: bool = True) -> str:
        """The Python source of `forward`, printed unless ``print_output=False``."""
        source = self.python_source()
        if print_output:
            print(source)
        return source

    def to_kir(self) -> str:
        """The graph as .kir text: built in memory (graph_build.py), printed by the C++
        printer."""
        from kiln._capture.graph_build import graph_text

        return graph_text(self)

    def __str__(self) -> str:
        return self.python_source()


_GRAPH_IDS = itertools.count()

# --- Python code generation ----------------------------------------------------------------------

_BINARY = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
    operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.matmul: "@",
    operator.and_: "&", operator.or_: "|", operator.xor: "^", operator.lshift: "<<",
    operator.rshift: ">>", operator.eq: "==", operator.ne: "!=", operator.lt: "<",
    operator.le: "<=", operator.gt: ">", operator.ge: ">=",
}  # fmt: skip
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}
_BINARY = {id(k): v for k, v in _BINARY.items()}  # keyed by id: targets need not be hashable
_UNARY = {id(k): v for k, v in _UNARY.items()}
_FLOAT_NAMES = {math.inf: "inf", -math.inf: "neg_inf"}


def _binding_candidates(target) -> list[str]:
    """Readable global names for a target, best first (`add`, `Tensor_view`, `operator_iadd`)."""
    qual = target_name(target)
    parts = [sanitize_name(p) for p in qual.split(".")]
    last = parts[-1]
    if qual.startswith("kiln.Tensor."):
        return [f"Tensor_{last}"]
    if qual.startswith("kiln.") or parts[0] == "builtins":
        return [last, "_".join(parts[-2:]), "_".join(parts)]
    return ["_".join(parts[-2:]), "_".join(parts)]


class _PythonCodegen:
    """Writes a graph as ``def forward(<inputs>): ...`` plus the globals it needs."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.namespace: dict[str, object] = {}
        self._bound: dict[int, str] = {}
        self._taken = {n.name for n in graph.nodes} | {"forward"}
        self._needed_names = self._names_read_later(graph)
        self.source = self._write()

    @staticmethod
    def _names_read_later(graph: Graph) -> set[str]:
        return {n.name for node in graph.nodes for n in nodes_in((node.args, node.kwargs))}

    def _bind(self, obj, candidates: list[str]) -> str:
        """The global name `obj` is bound to (the first free candidate, or one with a suffix)."""
        key = id(obj)
        if key in self._bound:
            return self._bound[key]
        name = next((c for c in candidates if c not in self._taken and _IDENT.match(c)), None)
        if name is None:
            base = candidates[0] if _IDENT.match(candidates[0]) else "const"
            names = (f"{base}_{k}" for k in itertools.count(1))
            name = next(n for n in names if n not in self._taken)
        self._taken.add(name)
        self._bound[key] = name
        self.namespace[name] = obj
        return name

    def _const(self, value) -> str:
        if value is None or type(value) in (bool, int, str):
            return repr(value)
        if value is Ellipsis:
            return "..."
        if type(value) is float:
            if math.isfinite(value):
                return repr(value)
            return self._bind(value, [_FLOAT_NAMES.get(value, "nan")])
        return self._bind(value, [self._const_name(value)])

    @staticmethod
    def _const_name(value) -> str:
        import kiln

        if isinstance(value, kiln.dtype):
            return str(value).rsplit(".", 1)[-1]
        if isinstance(value, kiln.device):
            return sanitize_name(f"device_{value}")
        return sanitize_name(f"const_{type(value).__name__}")

    def render(self, value) -> str:
        """Python source for an argument value."""
        if isinstance(value, Node):
            return value.name
        if type(value) is tuple:
            inner = ", ".join(self.render(v) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if is_namedtuple(value):  # rebuilt without the class's __new__ (PackedSequence checks)
            inner = ", ".join(self.render(v) for v in value)
            cls = self._bind(type(value), [type(value).__name__])
            return f"{self._bind(tuple.__new__, ['tuple_new'])}({cls}, ({inner},))"
        if type(value) is list:
            return "[" + ", ".join(self.render(v) for v in value) + "]"
        if type(value) is dict:
            items = (f"{self.render(k)}: {self.render(v)}" for k, v in value.items())
            return "{" + ", ".join(items) + "}"
        if type(value) is slice:
            parts = ", ".join(self.render(v) for v in (value.start, value.stop, value.step))
            return f"{self._bind(slice, ['slice'])}({parts})"
        return self._const(value)

    def _operand(self, value) -> str:
        """An operand of an infix operator, parenthesized unless it is a name or a literal."""
        text = self.render(value)
        if isinstance(value, Node) or _IDENT.match(text) or re.fullmatch(r"[0-9.e+]+", text):
            return text
        return f"({text})"

    def _index(self, idx) -> str:
        def elem(v):
            if type(v) is slice:
                parts = [("" if p is None else self.render(p)) for p in (v.start, v.stop, v.step)]
                return ":".join(parts if v.step is not None else parts[:2])
            return self.render(v)

        if type(idx) is tuple and idx:
            return ", ".join(elem(v) for v in idx) + ("," if len(idx) == 1 else "")
        return elem(idx)

    def _call_expr(self, node: Node) -> str:
        target, args, kwargs = node.target, node.args, node.kwargs
        if not kwargs:
            if id(target) in _BINARY and len(args) == 2:
                return f"{self._operand(args[0])} {_BINARY[id(target)]} {self._operand(args[1])}"
            if id(target) in _UNARY and len(args) == 1:
                return f"{_UNARY[id(target)]}{self._operand(args[0])}"
            if target is operator.getitem and len(args) == 2:
                return f"{self._operand(args[0])}[{self._index(args[1])}]"
        fn = self._bind(target, _binding_candidates(target))
        parts = [self.render(a) for a in args]
        for k, v in kwargs.items():
            if isinstance(k, str) and _IDENT.match(k) and not keyword.iskeyword(k):
                parts.append(f"{k}={self.render(v)}")
            else:
                parts.append(f"**{{{self.render(k)}: {self.render(v)}}}")
        return f"{fn}({', '.join(parts)})"

    def _statement(self, node: Node) -> str:
        loc = node.meta.get("loc")
        comment = f"  # {os.path.basename(str(loc[0]))}:{loc[1]}" if loc else ""
        args = node.args
        if node.target is operator.setitem and len(args) == 3 and not node.kwargs:
            stmt = f"{self._operand(args[0])}[{self._index(args[1])}] = {self.render(args[2])}"
            if node.name in self._needed_names or node.users:
                stmt += f"; {node.name} = None"
            return stmt + comment
        return f"{node.name} = {self._call_expr(node)}{comment}"

    def _write(self) -> str:
        graph = self.graph
        params = ", ".join(n.name for n in graph.inputs)
        calls = [n for n in graph.nodes if n.op == "call"]
        # Free each intermediate right after its last use, as eager code does when the last
        # reference goes: a 12-layer model would otherwise hold every activation at once.
        outputs = {id(n) for n in nodes_in(graph.outputs)}
        last_use: dict = {}
        for node in calls:
            for n in nodes_in((node.args, node.kwargs)):
                if n.op == "call" and id(n) not in outputs:
                    last_use[id(n)] = node
        frees: dict = {}
        for n in calls:
            user = last_use.get(id(n))
            if user is not None:
                frees.setdefault(id(user), []).append(n.name)
        body = []
        for n in calls:
            stmt = self._statement(n)
            mode = n.meta.get("grad_enabled", graph.grad_enabled)
            if mode != graph.grad_enabled:  # recorded inside a no_grad / enable_grad block
                import kiln

                manager = self._bind(kiln.set_grad_enabled, ["set_grad_enabled"])
                stmt = f"with {manager}({mode!r}): {stmt}"
            body.append(stmt)
            if id(n) in frees:
                body.append("del " + ", ".join(frees[id(n)]))
        outs = [self.render(v) for v in graph.outputs]
        ret = f"({outs[0]},)" if len(outs) == 1 else f"({', '.join(outs)})"
        body.append(f"return {ret}")
        return f"def forward({params}):\n" + "".join(f"    {line}\n" for line in body)
