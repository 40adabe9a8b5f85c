"""kiln.compile's default backend: captured graphs compiled by kiln's compiler, for the CPU or a
CUDA device (the device of the graph's tensors).

A captured `Graph` is built in memory (graph_build.py) and handed to ``kiln._C._compiler``
(shape-infer, graph passes, lowering to loop IR, fusion and scheduling, then MLIR/LLVM JIT
through the kernel cache for the CPU, or CUDA C through NVRTC for a CUDA device). What the
compiler does not accept runs as the graph's own eager Python code, so one unsupported op does
not lose the whole graph:

1. **Partition.** Call nodes that draw random numbers or have other effects (`graph.is_impure`)
   run eagerly, except dropout, rand and randn, whose kernels draw eager's numbers from the default
   generator's counters. In-place ops the op table spells (``x.add_(y)``, ``x += y``,
   ``relu(x, inplace=True)``, ``copy_``) compile: their parts are functionalized, and a mutated
   input of a part is written back once after it (the program's write-backs).
   The rest form maximal runs in program order; each run is built as a graph of its own (its
   inputs: graph inputs and values computed before it; its outputs: values read after it) and
   the C++ driver names every node of it that does not lower, with its reason, in one walk
   (``declines``). Nodes built as an opaque ``call`` or named there become eager, which splits
   their run; the new runs are checked again until every run lowers (usually at once). No rule
   about ops is duplicated here.
2. **Aliasing.** A run's output that eager code would have made a view of a value the caller
   can see (an input, or another output: ``x.view(...)``, ``x.transpose(...)``, a ``contiguous``
   that returns its input) is recomputed eagerly from the compiled values after the run, so later
   in-place ops and the caller see eager's aliasing; an in-place node's value is its mutated
   operand (never run again). The examples the evaluator computed say
   which values share storage.
3. **Compile** each run (`compile_graph`); one whose compile fails, or that only moves views and
   sizes around, runs eagerly instead. The result is one generated Python function
   (`Graph.compile_python` of a graph whose calls are the eager nodes and the compiled parts) that
   calls the parts in order and frees intermediates after their last use.
4. **Training.** When the graph's values require grad (grad mode on, parameters or inputs that
   require grad, as the capture's examples say), a part whose inputs require grad compiles as a
   forward and a backward graph (training.py: the joint graph of the op table's derivative rules,
   split), recorded as one autograd node per call; eager nodes between parts record their own
   history, so a partition or a graph break chains compiled backwards through eager autograd.
   A part whose derivative cannot be compiled (an op without a compiled rule, symbolic sizes, a
   mutated input) runs its nodes eagerly, which record autograd, with the reason in
   ``fallbacks``.
5. **At run time** a compiled part checks that its inputs still match what it was compiled for
   (sizes of symbolic dims, strides, shape-infer's assumptions); when they do not (a value an
   eager op computed changed shape under a dynamic capture) it runs its nodes eagerly for that
   call (SpecializationError), so results are always eager's.

`CpuBackend(fallback=False)` makes a decline an error (``BackendCompilerFailed``), for tests; it
is also usable as ``kiln.compile(fn, backend=CpuBackend(...))``. KILN_LOGS: ``graph`` prints the
partition and each fallback's reason, ``perf`` compile times and kernel-cache hits or misses,
``output_code`` each part's loop program and MLIR (``+output_code`` adds the LLVM IR).
"""

from __future__ import annotations

import operator
import os
import re
import time

import kiln
from kiln import _C
from kiln._capture import logs, training
from kiln._capture.ddp_split import bucket_splits
from kiln._capture.graph import (
    Graph,
    Node,
    is_impure,
    nodes_in,
    target_name,
)
from kiln._capture.graph_build import GraphWriter, Val
from kiln._capture.loops import LoopCall
from kiln._capture.masked_select import rewrite_masked_reductions
from kiln._capture.part_copies import (
    eager_call as _eager_call,
)
from kiln._capture.part_copies import (
    eager_function as _eager_function,
)
from kiln._capture.part_copies import (
    examples_for as _examples_for,
)
from kiln._capture.part_copies import (
    private_copy as _private_copy,
)
from kiln._capture.part_copies import (
    remap as _remap,
)
from kiln._capture.partition_rules import (
    SMALL_WRITE,
    assertions_later,
    compilable_mutation,
    impure_reason,
    is_multi_result,
    kernel_random,
    mutates,
    needs_grad,
    requires_grad_of,
    small_write_into_input,
    storage_of,
)

__all__ = ["BackendCompilerFailed", "CpuBackend", "PartitionReport", "compile_graph"]

class BackendCompilerFailed(RuntimeError):
    """The compiler declined part of a graph and fallback to eager code was turned off."""


class PartitionReport:
    """What the backend made of one graph: compiled parts and eager nodes (for logs and tests).

    ``parts``: per compiled part, the names of its nodes; ``eager``: names of nodes run eagerly;
    ``fallbacks``: ``(node name, target name, reason)`` per node or part the compiler declined;
    ``compiled_nodes`` / ``eager_nodes``: counts over the graph's call nodes; ``infos``: each
    compiled part's ``CompiledGraph.info`` (compile time, cache hit or miss, kernels);
    ``eager_calls``: calls of compiled parts that ran eagerly because their inputs did not match
    what they were compiled for; ``backward_parts``: compiled parts that also compiled their
    backward (training: their info has ``backward``, ``saved`` and ``saved_bytes``);
    ``loops``: the report of each loop node's body, whose counts and fallbacks are included in
    this report's; ``bucket_splits``: where a DistributedDataParallel model's training graph was
    cut at gradient-bucket boundaries (ddp_split.py), how many cuts.
    """

    def __init__(self, name: str):
        self.name = name
        self.parts: list[list[str]] = []
        self.eager: list[str] = []
        self.fallbacks: list[tuple[str, str, str]] = []
        self.infos: list[dict] = []
        self.compiled_nodes = 0
        self.eager_nodes = 0
        self.eager_calls = 0
        self.backward_parts = 0
        self.bucket_splits = 0
        self.loops: list[PartitionReport] = []  # the body of each loop node (loops.py)

    def __repr__(self) -> str:
        return (f"PartitionReport({self.name}: {len(self.parts)} compiled parts, "
                f"{self.compiled_nodes} compiled nodes, {self.eager_nodes} eager nodes)")


class CpuBackend:
    """``backend(graph, example_inputs) -> callable`` compiling through kiln's CPU compiler.

    fallback: run what the compiler declines eagerly (default) or raise BackendCompilerFailed.
    fuse: fuse loops (passes/schedule). Every report is appended to ``reports``.
    """

    def __init__(self, fallback: bool = True, fuse: bool = True):
        self.fallback = fallback
        self.fuse = fuse
        self.reports: list[PartitionReport] = []

    def __call__(self, graph: Graph, example_inputs=None):
        fn = compile_graph(graph, fallback=self.fallback, fuse=self.fuse)
        self.reports.append(fn.kiln_report)
        return fn


def compile_graph(graph: Graph, *, fallback: bool = True, fuse: bool = True):
    """A function ``f(*graph_inputs) -> tuple of graph outputs`` running `graph` through the
    CPU compiler, with eager code for what it does not accept (see the module docstring)."""
    start = time.perf_counter()
    masked = rewrite_masked_reductions(graph)
    if masked:
        logs.log("graph", f"backend: {graph.name}: {masked} boolean-mask selection(s) computed at "
                          "full shape, the mask applied by their reductions")
    part = _Partitioner(graph, fallback, fuse, training=_records_autograd(graph))
    try:
        fn = part.build()
    except BackendCompilerFailed:
        raise
    except Exception as e:  # a bug on the compiler's side must not break the user's program
        if not fallback:
            raise BackendCompilerFailed(f"kiln CPU backend: {graph.name}: {e}") from e
        logs.log("graph", f"backend: {graph.name}: runs eagerly, the backend failed: "
                          f"{type(e).__name__}: {e}")
        part.report = PartitionReport(graph.name)
        part.report.fallbacks.append(("", "the whole graph", f"{type(e).__name__}: {e}"))
        part.report.eager = [n.name for n in part.calls]
        part.report.eager_nodes = len(part.calls)
        fn = graph.compile_python()
    report = part.report
    logs.log("perf", lambda: f"backend: {graph.name}: {len(report.parts)} compiled parts "
                             f"({report.compiled_nodes} nodes), {report.eager_nodes} eager nodes, "
                             f"{time.perf_counter() - start:.3f} s")
    fn.kiln_report = report
    return fn


def _records_autograd(graph: Graph) -> bool:
    """Whether running `graph` must record autograd history: some value it computed during
    capture (where the eager ops ran with the caller's grad mode) requires grad, outside
    no_grad blocks (an optimizer's in-place update of a parameter returns the parameter)."""
    return any(requires_grad_of(n) for n in graph.nodes
               if n.op == "call" and n.meta.get("grad_enabled", graph.grad_enabled))


# --- Building a run of nodes as a graph ----------------------------------------------------------


class _Proxy:
    """A run's input as the graph writer sees a placeholder (name, example, symbolic sizes)."""

    __slots__ = ("name", "meta")

    def __init__(self, node: Node, sym_sizes=None, sym=None, example=None):
        self.name = node.name
        example = node.meta.get("example") if example is None else example
        self.meta = {"example": example, "loc": None}
        sym_sizes = node.meta.get("sym_sizes") if sym_sizes is None else sym_sizes
        sym = node.meta.get("sym") if sym is None else sym
        if sym_sizes is not None:
            self.meta["sym_sizes"] = sym_sizes
        if sym is not None:
            self.meta["sym"] = sym


class _RunWriter(GraphWriter):
    """Builds some call nodes as one graph: `inputs` (nodes computed elsewhere) become
    parameters, `outputs` the returned values. Records which builder nodes each node made."""

    def __init__(self, name: str, inputs: list, nodes: list[Node], outputs: list[Node],
                 types: dict | None = None, input_values: list | None = None):
        super().__init__(Graph(name))
        # the values of one call (tensors, ints) to type the inputs by instead of the examples
        self.input_values = input_values
        self.run_inputs, self.run_nodes, self.run_outputs = inputs, nodes, outputs
        self.types = types or {}
        self.owner: dict[int, Node] = {}  # builder position (number + 1) -> node that made it
        self.opaque: list[Node] = []  # nodes built as `call`
        self.input_symbols: dict[int, str] = {}
        self._typing_inputs = False  # intermediates keep their strides (a transpose is no copy)

    def tensor_type(self, example, sym_sizes=None):
        t = super().tensor_type(example, sym_sizes)
        t.device = None  # a part runs on one device, compile_graph's `device` option
        if self._typing_inputs and any(not re.fullmatch(r"-?[0-9]+", s) for s in t.sizes):
            t.contiguous = True  # symbolic strides are not guarded: the input is made dense
        return t

    def emit_call(self, node: Node) -> None:
        self.opaque.append(node)
        super().emit_call(node)

    def write(self):
        if self.input_values is not None:
            proxies = [_Proxy(node, _concrete_sizes(v), str(v) if type(v) is int else None, v)
                       for node, v in zip(self.run_inputs, self.input_values, strict=True)]
        else:
            proxies = [_Proxy(node, *self.types.get(id(node), (None, None)))
                       for node in self.run_inputs]
        for proxy in proxies:
            self._used_symbols.update(
                s for s in proxy.meta.get("sym_sizes") or () if isinstance(s, str))
            if isinstance(proxy.meta.get("sym"), str):  # a dynamic int (a loop's bound)
                self._used_symbols.add(proxy.meta["sym"])
        params = 0
        for node, proxy in zip(self.run_inputs, proxies, strict=True):
            self._typing_inputs = True
            try:
                val = self._input(proxy)
            finally:
                self._typing_inputs = False
            self.values[id(node)] = self.values.pop(id(proxy))
            if val is None:  # a tuple or None: its readers are built as opaque calls
                continue
            if val.type == "int" and val.sym is not None:
                self.input_symbols[params] = val.sym
            params += 1
        for node in self.run_nodes:
            first = self.builder.mark()
            self._call(node)
            for k in range(first, self.builder.mark()):
                self.owner[k + 1] = node
        outs = []
        for node in self.run_outputs:
            val = self.values.get(id(node))
            if not isinstance(val, Val):
                raise _NoKirValue(node)
            outs.append(val.handle)
        return self.builder.finish(outs)


class _NoKirValue(Exception):  # noqa: N818 - a signal
    """A run's output has no graph value (a tuple, None, a string): its node is eager."""

    def __init__(self, node: Node):
        super().__init__(node.name)
        self.node = node


# --- The partitioner -------------------------------------------------------------------------


class _Part:
    """A compiled part: its nodes, inputs, outputs and the eager recomputation of aliases."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.inputs: list[Node] = []
        self.outputs: list[Node] = []
        self.aliases: list[Node] = []  # recomputed eagerly after the part, in order


class _Partitioner:
    """Splits one graph into compiled parts and eager nodes and builds the function that runs
    them (see the module docstring); `report` says what it did."""

    def __init__(self, graph: Graph, fallback: bool, fuse: bool, training: bool = False):
        self.graph = graph
        self.fallback = fallback
        self.fuse = fuse
        self.training = training  # values require grad: parts that need it compile a backward
        self.calls = assertions_later([n for n in graph.nodes if n.op == "call"])
        self.position = {id(n): i for i, n in enumerate(self.calls)}
        self.report = PartitionReport(graph.name)
        self.emitted: list = []  # (part, CompiledGraph) per compiled part, in order
        self.eager: set[int] = set()
        for n in self.calls:  # effects the compiled code cannot replay: eager, with the reason
            if is_impure(n) and not kernel_random(n) and not compilable_mutation(n):
                self.eager.add(id(n))
                if not isinstance(n.target, LoopCall):  # a loop node compiles its own body
                    self.report.fallbacks.append((n.name, target_name(n.target),
                                                  impure_reason(n)))
            elif small_write_into_input(n, self.position):
                self.eager.add(id(n))
                self.report.fallbacks.append((n.name, target_name(n.target), SMALL_WRITE))
        # A loop node's results, read through getitem nodes, leave with the node (loops.py).
        self.loop_items = {id(u) for n in self.calls if isinstance(n.target, LoopCall)
                           for u in n.users if u.target is operator.getitem}
        self.eager |= self.loop_items
        self.checked: set[tuple] = set()
        self.types = self._symbolic_types()
        # Compiled DDP: parts end at gradient-bucket boundaries, so all-reduces overlap the
        # backward (ddp_split.py).
        self.splits = bucket_splits(self.calls, graph.inputs) if training else set()
        self.report.bucket_splits = len(self.splits)
        self.debug_code = "output_code" in getattr(logs, "_debug", ())

    # -- symbolic types of values computed by other parts ---------------------------------------

    def _symbolic_types(self) -> dict:
        """For a dynamic capture: each node's sizes as the whole graph's shape inference types
        them (`s0`, `s0*2`), so a run's inputs keep their symbols."""
        dynamic = any(n.meta.get("sym_sizes") or n.meta.get("sym") for n in self.graph.inputs)
        if not dynamic:
            return {}
        try:
            writer = GraphWriter(self.graph)
            writer.write()
        except Exception:  # noqa: BLE001 - without types, runs specialize (checked at run time)
            return {}
        types = {}
        for node in self.calls:
            val = writer.values.get(id(node))
            if isinstance(val, Val):
                types[id(node)] = (val.type.sizes if val.is_tensor else None, val.sym)
        return types

    # -- runs and their boundaries --------------------------------------------------------------

    def _runs(self) -> list[list[Node]]:
        runs, cur = [], []
        for n in self.calls:
            if id(n) in self.eager:
                if cur:
                    runs.append(cur)
                cur = []
            else:
                if id(n) in self.splits and cur:
                    runs.append(cur)
                    cur = []
                cur.append(n)
        return runs + ([cur] if cur else [])

    def _boundary(self, run: list[Node]) -> tuple[list[Node], list[Node]]:
        """The run's inputs (values from outside it, in first-use order) and outputs (its values
        read after it or returned, in program order)."""
        inside = {id(n) for n in run}
        inputs: dict[int, Node] = {}
        for n in run:
            for a in nodes_in((n.args, n.kwargs)):
                if id(a) not in inside:
                    inputs.setdefault(id(a), a)
        outputs = [n for n in run if any(id(u) not in inside for u in n.users)]
        return list(inputs.values()), outputs

    def _decline(self, node: Node, reason: str) -> None:
        self.eager.add(id(node))
        self.report.fallbacks.append((node.name, target_name(node.target), reason))
        if not self.fallback:
            raise BackendCompilerFailed(f"kiln CPU backend: {self.graph.name}: {node.name} = "
                                        f"{target_name(node.target)}(...): {reason}")

    def _check(self, run: list[Node]) -> bool:
        """Asks the compiler about `run`; marks one declining node eager and returns False, or
        returns True when the whole run lowers."""
        inputs, outputs = self._boundary(run)
        try:
            w = _RunWriter(f"{self.graph.name}_check", inputs, run, outputs, self.types)
            built = w.write()
        except _NoKirValue as e:
            self._decline(e.node, "its value has no graph type (a tuple, None or a string)")
            return False
        if w.opaque:
            for node in dict.fromkeys(w.opaque):
                why = node.meta.get("decline")  # what the op's lowering could not express
                self._decline(node, f"built as an opaque `call`: {why}" if why else
                              "no op for this call (built as an opaque `call`)")
            return False
        declined = _C._compiler.declines(built, f"{self.graph.name}.kir")
        if not declined:
            return True
        marked: set[int] = set()
        for position, reason in declined:  # every decline of the run, found in one walk
            node = w.owner.get(position)
            if node is None:  # not a node of the run (one a pass made): give up on the run
                for n in run:
                    if id(n) not in self.eager:
                        self._decline(n, reason)
                return False
            if id(node) not in marked:
                marked.add(id(node))
                self._decline(node, reason.split("error: ", 1)[-1])
        return False

    def _partition(self) -> list[list[Node]]:
        while True:
            runs = self._runs()
            done = True
            for run in runs:
                key = tuple(id(n) for n in run)
                if key in self.checked:
                    continue
                if self._check(run):
                    self.checked.add(key)
                else:
                    done = False
                    break
            if done:
                return runs

    # -- aliasing -------------------------------------------------------------------------------

    def _plan(self, run: list[Node]) -> _Part:
        """Inputs, outputs and the eagerly recomputed aliases of a run.

        An escaping value that shares storage with an input is recomputed eagerly (with the
        values it is computed from); of escaping values sharing storage made inside the run, the
        first node with that storage (its producer) is an output and the others are recomputed
        as views of it. A multi-result node (a split) is never an output, since a part returns
        tensors: its tuple is recomputed (its pieces are views) when an alias reads it, and its
        pieces that escape are outputs on their own.
        """
        part = _Part(run)
        inside = {id(n) for n in run}
        part.inputs, escaping = self._boundary(run)
        from_inputs = {storage_of(n.meta.get("example")) for n in part.inputs} - {0}
        producer: dict[int, Node] = {}
        for n in run:
            s = storage_of(n.meta.get("example"))
            if s and s not in from_inputs:
                producer.setdefault(s, n)
        outputs: set[int] = set()
        recompute: set[int] = set()
        pending = list(escaping)
        while pending:
            n = pending.pop()
            if id(n) in outputs or id(n) in recompute:
                continue
            s = storage_of(n.meta.get("example"))
            if (s == 0 or producer.get(s) is n) and not is_multi_result(n):
                outputs.add(id(n))
                continue
            recompute.add(id(n))
            if s in producer:
                pending.append(producer[s])
            pending.extend(a for a in nodes_in((n.args, n.kwargs)) if id(a) in inside)
        part.outputs = [n for n in run if id(n) in outputs]
        part.aliases = [n for n in run if id(n) in recompute]
        return part

    @staticmethod
    def _only_moves_data(part: _Part) -> bool:
        """Whether a part computes nothing: views of its inputs and Python numbers only."""
        for n in part.nodes:
            ex = n.meta.get("example")
            if not isinstance(ex, kiln.Tensor):
                continue
            if mutates(n):
                return False
            args = {storage_of(a.meta.get("example")) for a in nodes_in((n.args, n.kwargs))}
            if storage_of(ex) == 0 or storage_of(ex) not in args:
                return False
        return True

    # -- compiling ------------------------------------------------------------------------------

    def _compile(self, part: _Part, index: int):
        name = f"{self.graph.name}_part{index}"
        w = _RunWriter(name, part.inputs, part.nodes, part.outputs, self.types)
        built = w.write()
        options = {"filename": f"{name}.kir", "fuse": self.fuse,
                   "input_symbols": w.input_symbols, "dump_stages": self.debug_code}
        device = _part_device(part)
        if device != "cpu":
            options["device"] = device  # the part's kernels as CUDA C on that device
        compiled = _C._compiler.compile_graph(built, options)
        info = compiled.info
        logs.log("perf", lambda: f"backend: compiled {name}: {len(part.nodes)} nodes, "
                                 f"{info['kernels']} kernels ({info['extern_kernels']} library "
                                 f"calls) in {info['compile_seconds'] * 1e3:.1f} ms, kernel "
                                 f"cache {info['cache']}; {_C._compiler.cache_stats()}")
        logs.log("perf", lambda: f"backend: {name} stages: " + ", ".join(
            f"{stage} {seconds * 1e3:.2f} ms" for stage, seconds in info["stage_seconds"])
            + f", codegen+jit {info['jit_seconds'] * 1e3:.2f} ms")
        logs.log("output_code", lambda: _output_code(name, compiled, self.debug_code))
        return compiled, info

    def build(self):
        if not self.calls:
            return self.graph.compile_python()
        runs = self._partition()
        pg = Graph(self.graph.name)
        pg.grad_enabled = self.graph.grad_enabled
        env: dict[int, Node] = {}
        for n in self.graph.inputs:
            env[id(n)] = pg.placeholder(n.name, n.meta.get("example"), n.meta.get("sym_sizes"))
        planned = {id(run[0]): self._plan(run) for run in runs}
        index = 0
        i = 0
        while i < len(self.calls):
            node = self.calls[i]
            part = planned.get(id(node))
            if isinstance(node.target, LoopCall) or id(node) in self.loop_items:
                self._emit_loop(pg, env, node)
                i += 1
                continue
            if part is None:
                self._emit_eager(pg, env, node)
                i += 1
                continue
            i += len(part.nodes)
            # A part without outputs may still write into its inputs (NumPy's `B[1:-1] = ...`,
            # `x += y`): that is its result, written back by the program.
            if (not part.outputs and not any(mutates(n) for n in part.nodes)) or \
                    self._only_moves_data(part):
                for n in part.nodes:
                    self._emit_eager(pg, env, n)
                    if not isinstance(n.meta.get("example"), kiln.Tensor):
                        self.report.fallbacks.append((n.name, target_name(n.target),
                                                      "Python-number arithmetic between eager "
                                                      "calls runs as Python"))
                continue
            if self.training and needs_grad(part):
                if not self._emit_training(pg, env, part, index):
                    for n in part.nodes:
                        self._emit_eager(pg, env, n)
                    continue
                index += 1
                continue
            try:
                compiled, info = self._compile(part, index)
            except Exception as e:  # noqa: BLE001 - a compile failure falls back to eager code
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                first = part.nodes[0]
                self.report.fallbacks.append((first.name, f"part of {len(part.nodes)} nodes",
                                              reason))
                if not self.fallback:
                    raise BackendCompilerFailed(f"kiln CPU backend: {self.graph.name}: "
                                                f"compiling {len(part.nodes)} nodes failed: "
                                                f"{reason}") from e
                for n in part.nodes:
                    self._emit_eager(pg, env, n)
                continue
            self._emit_part(pg, env, part, compiled, index)
            self._record_part(part, info)
            index += 1
        pg.output(_remap(self.graph.outputs, env))
        self._log_partition()
        fn = pg.compile_python()
        fn.kiln_loop = self._whole_part_loop()
        logs.log("output_code", lambda: f"partitioned code of {self.graph.name} (compiled parts "
                                        f"and eager nodes):\n{fn.__kiln_source__}")
        return fn

    def _emit_training(self, pg: Graph, env: dict, part: _Part, index: int) -> bool:
        """Compiles a part whose inputs require grad as a forward and a backward graph
        (training.py); False (the fallback noted) when it cannot, so its nodes run eagerly and
        eager autograd records them. A part with symbolic sizes compiles per input shape
        (training.PerShapeTraining): the derivative rules need sizes as numbers."""
        name = f"{self.graph.name}_part{index}"
        reason = None
        try:
            fn, info = _build_training(part.inputs, part.nodes, part.outputs, name, self.fuse,
                                       self.debug_code, types=self.types)
        except Exception as e:  # noqa: BLE001 - what has no compiled derivative runs eagerly
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if reason is not None and self.types:  # a dynamic capture: compile per shape instead
            try:
                fn, info = self._per_shape_training(part, name)
                reason = None
            except Exception as e:  # noqa: BLE001
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if reason is not None:
            self.report.fallbacks.append((part.nodes[0].name,
                                          f"backward of {len(part.nodes)} nodes", reason))
            if not self.fallback:
                raise BackendCompilerFailed(f"kiln CPU backend: {self.graph.name}: compiled "
                                            f"training of {len(part.nodes)} nodes: {reason}")
            return False
        if isinstance(fn, training.TrainingPart):  # (a PerShapeTraining's parts have theirs)
            fn.fallback = (_eager_function(part, name), self.report)
        self._emit_call(pg, env, part, fn)
        self._record_part(part, info)
        self.report.backward_parts += 1
        return True

    def _per_shape_training(self, part: _Part, name: str):
        """A PerShapeTraining for `part`, built once now for the capture's own shapes (so a part
        that cannot train for other reasons falls back here, not at run time)."""
        inputs, nodes, outputs = _private_copy(part)
        fuse, debug, report = self.fuse, self.debug_code, self.report
        eager = _eager_function(part, name)

        def build(values):
            with _examples_for(inputs, nodes, values):
                built = _build_training(inputs, nodes, outputs, name, fuse, debug,
                                        input_values=list(values))[0]
            built.fallback = (eager, report)
            return built

        examples = [n.meta.get("example") for n in part.inputs]
        first, info = _build_training(part.inputs, part.nodes, part.outputs, name, fuse, debug,
                                      input_values=examples)
        first.fallback = (eager, report)
        per_shape = training.PerShapeTraining(build, eager, name, report)
        per_shape.add(examples, first)
        return per_shape, dict(info, per_shape=True)

    def _emit_eager(self, pg: Graph, env: dict, node: Node) -> None:
        env[id(node)] = _eager_call(pg, node, env)
        self.report.eager.append(node.name)
        self.report.eager_nodes += 1

    def _emit_loop(self, pg: Graph, env: dict, node: Node) -> None:
        """A loop node runs its body compiled as a graph of its own (its report joins this
        graph's); a getitem of its results is one of its outputs."""
        target = node.target
        if isinstance(target, LoopCall):
            body = compile_graph(target.body, fallback=self.fallback, fuse=self.fuse)
            r = body.kiln_report
            self.report.loops.append(r)
            self.report.compiled_nodes += r.compiled_nodes
            self.report.eager_nodes += r.eager_nodes
            self.report.fallbacks += [(name, what, f"in loop body {r.name}: {reason}")
                                      for name, what, reason in r.fallbacks]
            target = target.with_body(body)
        env[id(node)] = pg.call(target, _remap(node.args, env), _remap(node.kwargs, env),
                                node.meta.get("example"), node.meta.get("loc"))

    def _whole_part_loop(self):
        """The compiled part's `loop` when the graph is that one part alone (its inputs and
        outputs the graph's, in order, nothing eager around it): a loop node whose body this
        is runs its iterations in C++ (LoopCall). None otherwise."""
        if len(self.emitted) != 1 or self.report.eager_nodes or self.report.loops:
            return None
        part, compiled = self.emitted[0]
        outputs, inputs = self.graph.outputs, list(self.graph.inputs)
        if part.aliases or len(part.inputs) != len(inputs) or \
                {id(n) for n in part.inputs} != {id(n) for n in inputs} or \
                not isinstance(outputs, (list, tuple)):
            return None
        position = {id(n): k for k, n in enumerate(part.outputs)}
        slot = {id(n): k for k, n in enumerate(inputs)}
        if not all(id(n) in position or id(n) in slot for n in outputs):
            return None
        # each body output: a part output, or (-1 - k) a body input passed through
        where = [position[id(n)] if id(n) in position else -1 - slot[id(n)] for n in outputs]
        return _PartLoop(compiled, [inputs.index(n) for n in part.inputs], where,
                         any(mutates(n) for n in part.nodes))

    def _emit_part(self, pg: Graph, env: dict, part: _Part, compiled, index: int) -> None:
        self.emitted.append((part, compiled))
        name = f"{self.graph.name}_part{index}"
        self._emit_call(pg, env, part,
                        _CompiledPart(compiled, _eager_function(part, name), name, self.report,
                                      mutates=any(mutates(n) for n in part.nodes)))

    def _record_part(self, part: _Part, info: dict) -> None:
        self.report.parts.append([n.name for n in part.nodes])
        self.report.infos.append(info)
        self.report.compiled_nodes += len(part.nodes)

    @staticmethod
    def _emit_call(pg: Graph, env: dict, part: _Part, fn) -> None:
        """One call of `fn` (a compiled part) for the part's nodes: its outputs by position, then
        the aliases recomputed eagerly from them."""
        examples = tuple(n.meta.get("example") for n in part.outputs)
        call = pg.call(fn, tuple(env[id(n)] for n in part.inputs), {}, examples, None)
        for k, n in enumerate(part.outputs):
            env[id(n)] = pg.call(operator.getitem, (call, k), {}, examples[k], n.meta.get("loc"))
        for n in part.aliases:
            if mutates(n):  # the part did the mutation: the value is the written operand
                env[id(n)] = env[id(n.args[0])]
                continue
            env[id(n)] = pg.call(n.target, _remap(n.args, env), _remap(n.kwargs, env),
                                 n.meta.get("example"), n.meta.get("loc"))

    def _log_partition(self) -> None:
        def text():
            r = self.report
            lines = [f"backend: {r.name}: {len(r.parts)} compiled parts, {r.compiled_nodes} "
                     f"compiled nodes, {r.eager_nodes} eager nodes"]
            if r.bucket_splits:
                lines.append(f"  cut at {r.bucket_splits} DDP gradient-bucket boundaries")
            for k, names in enumerate(r.parts):
                lines.append(f"  part{k}: {', '.join(names)}")
            if r.eager:
                lines.append(f"  eager: {', '.join(r.eager)}")
            for name, target, reason in r.fallbacks:
                lines.append(f"  fallback {name} ({target}): {reason}")
            return "\n".join(lines)

        logs.log("graph", text)


class _PartLoop:
    """A loop node's iterations run in C++ (CompiledGraph.loop) on a body that is one compiled
    part; the part takes the body's inputs and returns its outputs in its own order
    (`inputs[k]`: the body input at the part's input k; `outputs[b]`: the part output that is
    the body's output b, several body outputs may be one, or -1 - s where the body returns its
    input s as it is: a loop that breaks before `x = x_new` returns x)."""

    def __init__(self, compiled, inputs: list[int], outputs: list[int], writes_inputs: bool):
        self.compiled, self.inputs, self.outputs = compiled, inputs, outputs
        self.writes_inputs = writes_inputs
        self.position = {body: k for k, body in enumerate(inputs)}

    def __call__(self, start, stop, step, args: list, carried: list[int], index_slot: int,
                 breaks_when: bool | None = None):
        """Runs the iterations: (the index it stopped at, the body's outputs or None, whether a
        break ended it), or None when the body's outputs cannot run that way (two carried into
        one part output, or the break test carried)."""
        first = 0 if breaks_when is None else 1  # a break's test comes first (LoopCall)
        feeds = [-1] * (max(self.outputs, default=-1) + 1)  # the part input each output feeds
        for k, slot in enumerate(carried):
            part_output, part_input = self.outputs[first + k], self.position[slot]
            if part_output < 0:
                if -1 - part_output != slot:
                    return None  # an input carried into another one
                continue  # carried as it is
            if feeds[part_output] not in (-1, part_input):
                return None
            feeds[part_output] = part_input
        test = self.outputs[0] if breaks_when is not None else -1
        if breaks_when is not None and (test < 0 or feeds[test] != -1):
            return None
        # A body input returned as it came is read back from the arguments after the loop:
        # right for an input nothing feeds, and for the break's values (the loop stops before
        # feeding that run's outputs back); an iteration's result there would be the next
        # run's input instead.
        fed = {part_input for part_input in feeds if part_input >= 0}
        results_end = len(self.outputs) if breaks_when is None else \
            1 + (len(self.outputs) - 1) // 2
        if any(p < 0 and self.position[-1 - p] in fed
               for p in self.outputs[first:results_end]):
            return None
        ours = [args[body] for body in self.inputs]
        at, outputs, broke = self.compiled.loop(
            start, stop, step, ours, feeds, self.position[index_slot] if index_slot >= 0 else -1,
            self.writes_inputs, test, bool(breaks_when))
        for k, body in enumerate(self.inputs):
            args[body] = ours[k]
        if outputs is not None:
            outputs = tuple(outputs[p] if p >= 0 else args[-1 - p] for p in self.outputs)
        return at, outputs, broke


class _CompiledPart:
    """Calls a CompiledGraph; inputs it was not compiled for run `eager` (the part's nodes as
    Python code, made up front so that no example values stay referenced).

    A part that mutates its inputs was functionalized on the assumption that its inputs are
    distinct tensors; called with two inputs sharing storage (f(t, t[0]), f(t, t.expand(...)))
    a write through one must be seen through the other, so such a call runs eagerly."""

    def __init__(self, compiled, eager, name: str, report: PartitionReport, mutates=False):
        self.compiled = compiled
        self.eager = eager
        self.report = report
        self.mutates = mutates
        self.__name__ = self.__qualname__ = name
        self.__module__ = "kiln.compiled"

    def __call__(self, *args):
        if self.mutates and _share_storage(args):
            logs.log("perf", f"backend: {self.__name__} runs eagerly: inputs share storage")
            self.report.eager_calls += 1
            return self.eager(*args)
        try:
            return self.compiled(*args)
        except _C._compiler.SpecializationError as e:
            logs.log("perf", f"backend: {self.__name__} runs eagerly for these inputs: {e}")
            self.report.eager_calls += 1
            return self.eager(*args)
        except IndexError as compiled_error:
            # A compiled gather met an index out of range, or a region write's index is out of
            # range (the runner checks every region before it writes any). Nothing was written
            # yet (results are copied into mutated inputs after a run), so eager can run the
            # part to raise its own error: the op, its dim and the user's line, of the type
            # eager raises.
            try:
                self.eager(*args)
            except Exception as e:  # noqa: BLE001 - eager's error is the one the user expects
                raise e from None
            raise compiled_error


_share_storage = _C._compiler.share_storage  # whether two tensor arguments share storage


def _part_device(part: _Part) -> str:
    """The one device a part's tensors are on ("cpu" when it has none). A part mixing devices
    (a 0-d CPU tensor aside, which the device program reads as a scalar) is not compiled: it runs
    eagerly, where the ops say what they think of it."""
    devices = set()
    for n in [*part.inputs, *part.nodes]:
        ex = n.meta.get("example")
        if isinstance(ex, kiln.Tensor) and not (ex.dim() == 0 and ex._device_str == "cpu"):
            devices.add(ex._device_str)
    if len(devices) > 1:
        raise ValueError(f"tensors on several devices ({', '.join(sorted(devices))})")
    return devices.pop() if devices else "cpu"


def _concrete_sizes(value):
    return [str(d) for d in value.shape] if isinstance(value, kiln.Tensor) else None


def _check_history_of_writes(inputs, nodes) -> None:
    """Raises ValueError for an in-place write of a value that requires grad into a part input
    that does not (zeros, then index_add_ of a layer's output): eager autograd gives that tensor
    its history, which a compiled node cannot attach to the caller's tensor, so the part runs
    eagerly. (A BatchNorm's running statistics take no history: their example stays without
    grad.)"""
    no_grad_inputs = {id(n) for n in inputs if not requires_grad_of(n)}
    for n in nodes:
        if not (mutates(n) and n.args and id(n.args[0]) in no_grad_inputs):
            continue
        written = n.args[2] if n.target is operator.setitem and len(n.args) > 2 else n
        if isinstance(written, Node) and requires_grad_of(written):
            raise ValueError(f"an in-place write into {n.args[0].name} of a value that requires "
                             "grad (the tensor takes eager autograd's history)")


def _build_training(inputs, nodes, outputs, name: str, fuse: bool, debug: bool, *, types=None,
                    input_values=None):
    """(TrainingPart, info) of these nodes, typed by `types` (symbolic) or by the values of one
    call (`input_values`)."""
    _check_history_of_writes(inputs, nodes)
    w = _RunWriter(name, inputs, nodes, outputs, types, input_values)
    built = w.write()
    needs = [requires_grad_of(n) for n in inputs]
    # nodes a no_grad block computed (an in-place one's example is its operand, which may
    # require grad: an optimizer's update of a parameter)
    no_grad = [pos for pos, n in w.owner.items()
               if not requires_grad_of(n) or n.meta.get("grad_enabled", True) is False]
    options = {"fuse": fuse, "input_symbols": w.input_symbols, "dump_stages": debug}
    forward, backward, spec = training.build(built, needs, no_grad, name, options)
    info = forward.info
    info.update(backward=backward.info, saved=len(spec["saved"]),
                saved_bytes=spec["saved_bytes"])
    return training.TrainingPart(forward, backward, spec, len(outputs), name), info


def _output_code(name: str, compiled, llvm: bool) -> str:
    text = (f"compiled part {name}:\n// .kir after the graph passes\n{compiled.graph_text}"
            f"// scheduled loop program\n{compiled.loop_text}\n{compiled.mlir}")
    if llvm:
        text += f"\n// LLVM IR\n{compiled.dumps['llvm_ir']}"
    return text


def default_backend_enabled() -> bool:
    """KILN_BACKEND=eager turns the compiler off for backend=None (a debugging switch)."""
    return os.environ.get("KILN_BACKEND", "") != "eager"
