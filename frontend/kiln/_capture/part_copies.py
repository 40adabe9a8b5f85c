"""Copies of a compiled part's nodes that the CPU backend (backend_compiled.py) builds: the
part as eager Python code (what runs when its compiled code cannot), and a private copy whose
examples hold no memory, which a per-shape training part builds again with one call's
examples."""

from __future__ import annotations

import contextlib

import kiln
from kiln._capture import codegen
from kiln._capture.graph import Graph, Node, replace_nodes

__all__ = ["eager_call", "eager_function", "examples_for", "light", "private_copy", "remap"]


def light(example):
    """A stand-in for an example with its dtype, shape, device and requires_grad, and no
    memory of its own (a 0-d tensor expanded)."""
    if isinstance(example, kiln.Tensor):
        one = kiln.zeros((), dtype=example.dtype, device=example.device)
        if example.requires_grad:
            one.requires_grad_(True)
        return one.expand(example.shape)
    if isinstance(example, (tuple, list)):
        return type(example)(light(e) for e in example)
    return example


@contextlib.contextmanager
def examples_for(inputs: list, nodes: list, values):
    """Gives the nodes of a `private_copy` the examples eager computes from one call's
    `values` (with the capture's requires_grad), so lowerings and the checks against examples
    see this call's shapes; the memoryless ones are put back after. The inputs are cloned, and
    the default generator is put back, so the call's tensors and random stream stay as they
    were."""
    light = {id(n): n.meta.get("example") for n in [*inputs, *nodes]}
    state = kiln.default_generator.get_state()
    env: dict[int, object] = {}
    try:
        with kiln.no_grad():
            for n, v in zip(inputs, values, strict=True):
                env[id(n)] = v.detach().clone() if isinstance(v, kiln.Tensor) else v
            for n in nodes:
                env[id(n)] = n.target(*remap(n.args, env), **remap(n.kwargs, env))
        for n in [*inputs, *nodes]:
            n.meta["example"] = grad_like(env[id(n)], light[id(n)])
        yield
    finally:
        kiln.default_generator.set_state(state)
        for n in [*inputs, *nodes]:
            n.meta["example"] = light[id(n)]


def grad_like(value, like):
    """`value` requiring grad where the capture's example `like` did."""
    if isinstance(value, kiln.Tensor):
        value = value.detach()
        return value.requires_grad_(True) if getattr(like, "requires_grad", False) else value
    if isinstance(value, (tuple, list)):
        return type(value)(grad_like(v, lk) for v, lk in zip(value, like, strict=True))
    return value


def private_copy(part):
    """The part's inputs, nodes and outputs copied into a graph of their own whose examples
    hold no memory (what a PerShapeTraining keeps to build the part again for other shapes)."""
    g = Graph("per_shape")
    env: dict[int, Node] = {}

    def copy_meta(src: Node, dst: Node) -> None:  # not the capture's sizes: a call's are used
        dst.meta.update({k: v for k, v in src.meta.items()
                         if k not in ("example", "sym_sizes", "sym")})

    for n in part.inputs:
        env[id(n)] = p = g.placeholder(n.name, light(n.meta.get("example")))
        copy_meta(n, p)
    for n in part.nodes:
        env[id(n)] = c = g.call(n.target, remap(n.args, env), remap(n.kwargs, env),
                                light(n.meta.get("example")), n.meta.get("loc"))
        copy_meta(n, c)
    # The outputs read: an in-place node whose operand is an output must write it, not become
    # a pure op (the writer asks the operand's users).
    g.output([env[id(n)] for n in part.outputs])
    return ([env[id(n)] for n in part.inputs], [env[id(n)] for n in part.nodes],
            [env[id(n)] for n in part.outputs])


def eager_function(part, name: str):
    """The part's nodes as eager Python code with the part's inputs and outputs."""
    g = Graph(name)
    g.grad_enabled = part.nodes[0].graph.grad_enabled if part.nodes else True
    env = {id(n): g.placeholder(n.name, n.meta.get("example")) for n in part.inputs}
    for n in part.nodes:
        env[id(n)] = eager_call(g, n, env)
    g.output([env[id(n)] for n in part.outputs])
    return g.compile_python()


def eager_call(g: Graph, node: Node, env: dict) -> Node:
    """`node` as a call of its eager target in `g`, in the grad mode it was recorded in (a
    no_grad block's in-place update of a parameter stays one)."""
    call = g.call(codegen.eager_target(node), remap(node.args, env), remap(node.kwargs, env),
                  node.meta.get("example"), node.meta.get("loc"))
    if "grad_enabled" in node.meta:
        call.meta["grad_enabled"] = node.meta["grad_enabled"]
    return call


def remap(value, env: dict):
    """`value` with every Node replaced by env[id(node)] (through tuples, lists, dicts, slices)."""
    return replace_nodes(value, lambda n: env[id(n)])
