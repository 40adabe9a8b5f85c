"""Compiled training: a compiled part whose inputs require grad runs as a forward graph and a
backward graph, one autograd node in the eager graph.

``kiln._C._compiler.training_graphs`` builds the joint forward+backward graph of the part from
the op table's derivative rules (the ones eager autograd runs, passes/autodiff) and splits it:
the forward graph returns the part's outputs and then the values the backward needs (the saved
values, chosen by a min-cut over the joint graph: what cheap ops can recompute is recomputed in
the backward instead). Both compile through the
one pipeline, so backward kernels fuse as forward ones do. At run time, with grad mode on, the
part runs the compiled forward and records one node (``CompiledFunctionBackward``) whose
backward calls the compiled backward with the saved values and the output gradients. With grad
mode off it runs the same forward and drops what it saved.

``KILN_LOGS=aot`` prints the joint, forward and backward graphs and the saved values' bytes.
"""

from __future__ import annotations

import kiln
from kiln import _C
from kiln._capture import logs


def build(built, needs_grad: list[bool], no_grad: list[int], name: str, options: dict):
    """(forward CompiledGraph, backward CompiledGraph, interface dict) of a built part graph
    whose inputs `needs_grad` require grad; the nodes at builder positions `no_grad` carry no
    gradient (a no_grad block computed them)."""
    spec = _C._compiler.training_graphs(built, needs_grad, no_grad)
    # activations the forward saves (saved inputs are alive anyway)
    saved_bytes = sum(b for is_input, _, b, _ in spec["saved"] if not is_input)
    logs.log("aot", lambda: f"aot: {name}: joint graph\n{spec['joint_text']}")
    forward = _C._compiler.compile_graph(spec["forward"],
                                         dict(options, filename=f"{name}_forward.kir"))
    backward_options = dict(options, filename=f"{name}_backward.kir", input_symbols={})
    backward = _C._compiler.compile_graph(spec["backward"], backward_options)
    logs.log("aot", lambda: f"aot: {name}: forward graph\n{forward.graph_text}\n"
                            f"aot: {name}: backward graph\n{backward.graph_text}\n"
                            f"aot: {name}: {len(spec['saved'])} saved values ({saved_bytes} bytes "
                            "of activations): "
                            + ", ".join(f"{op} ({b} bytes)" for _, _, b, op in spec["saved"]))
    spec["saved_bytes"] = saved_bytes
    return forward, backward, spec


_share_storage = _C._compiler.share_storage  # whether two tensor arguments share storage


class TrainingPart:
    """Calls a part's compiled forward and records its compiled backward (module docstring)."""

    def __init__(self, forward, backward, spec: dict, num_outputs: int, name: str):
        self.forward = forward
        self.backward = backward
        self.num_outputs = num_outputs
        self.saved = [(bool(is_input), index) for is_input, index, _, _ in spec["saved"]]
        self.grad_outputs = list(spec["grad_outputs"])
        self.input_grads = list(spec["input_grads"])
        # per input gradient: the output gradients it is computed from (none given: None)
        self.grad_sources = [list(s) for s in spec["input_grad_sources"]]
        # in-place updates with grad of inputs (input, output of its new value, outputs that are
        # that value): written back here, through autograd, as eager's in-place op records them
        self.write_backs = [(i, k, list(same)) for i, k, same in spec.get("write_backs", ())]
        self.num_results = num_outputs + len(self.write_backs)
        self.__name__ = self.__qualname__ = name
        self.__module__ = "kiln.compiled"
        # (the part's nodes as eager code, its PartitionReport): inputs the forward was not
        # compiled for (an int it specialized) run there, and eager autograd records them
        self.fallback = None

    def __call__(self, *args):
        try:
            raw = self.forward(*args)
        except _C._compiler.SpecializationError as e:
            if self.fallback is None:
                raise
            eager, report = self.fallback
            logs.log("perf", f"backend: {self.__name__} runs eagerly for these inputs: {e}")
            report.eager_calls += 1
            return eager(*args)
        outs = raw[: self.num_results]
        inputs = [args[i] for i in self.input_grads]
        if not (_C._autograd.is_grad_enabled() and any(t.requires_grad for t in inputs)):
            return self._write_back(args, outs)
        updated = [args[i] for i, _, _ in self.write_backs]
        saved = [self._saved_input(args[i], updated) if is_input else raw[i]
                 for is_input, i in self.saved]
        grad_of = [outs[k] for k in self.grad_outputs]
        shapes = [(o.shape, o.dtype) for o in grad_of]
        backward, name, sources = self.backward, self.__name__, self.grad_sources

        def run_backward(*grads):
            if _C._autograd.is_grad_enabled():
                raise RuntimeError(
                    f"{name}: the compiled backward does not record its own derivative "
                    "(create_graph=True); run this function uncompiled for double backward")
            gs = [kiln.zeros(shape, dtype=dtype) if g is None else g.contiguous()
                  for g, (shape, dtype) in zip(grads, shapes, strict=True)]
            result = tuple(backward(*saved, *gs))
            if any(g is None for g in grads):
                # an input reached only from outputs nobody used gets None, as in eager (an
                # optimizer then leaves its parameter alone), not zeros
                result = tuple(None if all(grads[k] is None for k in src) else r
                               for r, src in zip(result, sources, strict=True))
            return result

        _C._autograd._record_function("CompiledFunctionBackward", run_backward, inputs, grad_of,
                                      materialize_grads=False)
        return self._write_back(args, outs)

    @staticmethod
    def _saved_input(value, updated: list):
        """A forward input the backward reads: as it is, or, when the caller is about to update
        its memory (it is an updated input or a view sharing one's storage), a copy of it as it
        was."""
        if not isinstance(value, kiln.Tensor):
            return value
        if any(_share_storage((value, u)) or value is u for u in updated):
            return value.detach().contiguous().clone()
        return value.contiguous()

    def _write_back(self, args, results):
        """The graph's outputs, after the updates with grad are copied into their inputs: the
        input takes the update's autograd history (CopyBackward to the compiled node), and an
        output that is the updated value is the input itself, as in eager."""
        if not self.write_backs:
            return results[: self.num_outputs]
        outs = list(results[: self.num_outputs])
        for i, k, same in self.write_backs:
            args[i].copy_(results[k])
            for j in same:
                outs[j] = args[i]
        return type(results)(outs)


class PerShapeTraining:
    """A training part whose capture has symbolic sizes. The derivative rules read sizes as
    numbers, so its forward and backward are compiled for each distinct shape (and layout) of
    its inputs, on first sight: one capture serves every batch size, each size compiling once.
    Past `LIMIT` shapes (or where a shape does not compile) the part runs eagerly, and eager
    autograd records it."""

    LIMIT = 16

    def __init__(self, build, eager, name: str, report):
        self.build = build  # input values -> TrainingPart
        self.eager = eager
        self.report = report
        self.parts: dict = {}
        self.__name__ = self.__qualname__ = name
        self.__module__ = "kiln.compiled"

    @staticmethod
    def key(values) -> tuple:
        return tuple((v.dtype, tuple(v.shape), v.stride(), v._device_str)
                     if isinstance(v, kiln.Tensor) else v for v in values)

    def add(self, values, part) -> None:
        self.parts[self.key(values)] = part

    def __call__(self, *args):
        key = self.key(args)
        part = self.parts.get(key, False)
        if part is False:
            part = None
            if len(self.parts) < self.LIMIT:
                try:
                    part = self.build(args)
                except Exception as e:  # noqa: BLE001 - this shape runs eagerly
                    logs.log("perf", f"backend: {self.__name__}: no compiled training for "
                                     f"these shapes: {e}")
                self.parts[key] = part  # a shape that failed stays eager
            if part is not None:
                shapes = [list(a.shape) for a in args if isinstance(a, kiln.Tensor)]
                logs.log("perf", f"backend: {self.__name__}: compiled training for {shapes}")
        if part is None:
            self.report.eager_calls += 1
            return self.eager(*args)
        return part(*args)
