"""`ExportedProgram`: an exported graph (`.kir` text) with its weights, specs, save and run.

Everything a program knows about its interface is read back from its own text (kir_text.py,
through the C++ driver), so a program fresh from kiln.export and one loaded from disk behave
the same.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import kiln
from kiln._export import out_spec as spec_mod
from kiln._export.atomic import atomic_write_all
from kiln._export.kir_text import read_interface
from kiln._export.safetensors import file_writer

__all__ = ["ExportedProgram", "InputSpec", "OutputSpec", "split_path"]


@dataclass(frozen=True)
class InputSpec:
    """A graph parameter: name, dtype (None for a Python number), shape (ints and symbol names),
    and the ranges of the symbols it uses ({name: (min, max | None)})."""

    name: str
    dtype: object
    shape: tuple
    ranges: dict
    kind: str = "tensor"


@dataclass(frozen=True)
class OutputSpec:
    """Output k of the program (``%k`` in out_spec): its value name, dtype and shape."""

    name: str
    dtype: object
    shape: tuple
    kind: str = "tensor"


def split_path(path) -> tuple[str, str]:
    """(folder, NAME) of ``DIR/NAME`` or ``DIR/NAME.kir``."""
    path = os.fspath(path)
    folder, base = os.path.split(path)
    if base.endswith(".kir"):
        base = base[: -len(".kir")]
    if not base:
        raise ValueError(f"{path!r} does not name a program (expected DIR/NAME or DIR/NAME.kir)")
    return folder or ".", base


def _dtype(name):
    return None if name is None else getattr(kiln, name)


class ExportedProgram:
    """A program made by kiln.export or read by kiln.load_exported.

    ``graph_text`` is its `.kir` text, ``weights`` its tensors by key (contiguous),
    ``input_specs`` / ``output_specs`` describe its parameters and outputs, ``range_constraints``
    the ranges of its size symbols, ``out_spec`` how its outputs are packed.
    """

    def __init__(self, graph_text: str, weights: dict, name: str | None = None) -> None:
        iface = read_interface(graph_text, f"{name or 'program'}.kir")
        self.graph_text = graph_text
        self.weights = dict(weights)
        self.name = name or iface.name
        self.range_constraints = dict(iface.ranges)
        self.input_specs = [self._input_spec(n, t) for n, t in iface.params]
        self.output_specs = [
            OutputSpec(n, _dtype(t.dtype), t.sizes, t.kind) for n, t in iface.outputs
        ]
        self.out_spec = iface.out_spec
        text = self.out_spec if self.out_spec is not None else (
            "(" + ", ".join(f"%{k}" for k in range(len(iface.outputs)))
            + ("," if len(iface.outputs) == 1 else "") + ")")
        self._spec = spec_mod.parse_spec(text)
        bad = [k for k in spec_mod.output_indices(self._spec) if k >= len(iface.outputs)]
        if bad:
            raise spec_mod.OutSpecError(f"out_spec {text!r} names output %{bad[0]}, but the "
                                        f"program has {len(iface.outputs)} outputs")
        self.weight_specs = {key: t for key, t in iface.weights}
        self._compiled = None
        self._lock = threading.Lock()

    def _input_spec(self, name, t) -> InputSpec:
        used = {s: self.range_constraints.get(s, (2, None)) for s in t.sizes if isinstance(s, str)}
        return InputSpec(name, _dtype(t.dtype), t.sizes, used, t.kind)

    def __repr__(self) -> str:
        def type_(s):
            if s.kind != "tensor":
                return s.kind
            return f"{s.dtype.name}[" + ", ".join(str(d) for d in s.shape) + "]"

        ins = ", ".join(f"{s.name}: {type_(s)}" for s in self.input_specs)
        outs = ", ".join(type_(s) for s in self.output_specs)
        ranges = ", ".join(f"{k} in [{lo}, {'inf' if hi is None else hi}]"
                           for k, (lo, hi) in self.range_constraints.items())
        n = sum(t.numel() for t in self.weights.values())
        return (f"ExportedProgram({self.name}({ins}) -> {outs}; out_spec {self.out_spec}; "
                f"{len(self.weights)} weights, {n} elements"
                + (f"; {ranges}" if ranges else "") + ")")

    # -- saving ------------------------------------------------------------------------------

    def save(self, path) -> None:
        """Writes ``NAME.kir`` and ``NAME.safetensors`` next to each other.

        `path` is ``DIR/NAME`` or ``DIR/NAME.kir`` (DIR is created when missing). Both files are
        written to temporary files first and renamed over the old ones only when both are
        complete, so an error leaves the old files as they were.
        """
        folder, name = split_path(path)
        os.makedirs(folder or ".", exist_ok=True)
        metadata = {"format": "kiln", "kiln.program": name}
        data = self.graph_text.encode("utf-8")
        atomic_write_all([
            (os.path.join(folder, name + ".safetensors"), file_writer(self.weights, metadata)),
            (os.path.join(folder, name + ".kir"), lambda f: f.write(data)),
        ])

    # -- running -----------------------------------------------------------------------------

    def _compile(self):
        with self._lock:
            if self._compiled is None:
                filename = f"{self.name}.kir"
                self._compiled = kiln._C._compiler.compile_graph(
                    kiln._C._ir.parse(self.graph_text, filename),
                    {"weights": self.weights, "filename": filename})
            return self._compiled

    def check_inputs(self, args) -> None:
        """Raises TypeError/ValueError naming the first argument that does not fit the specs."""
        if len(args) != len(self.input_specs):
            names = ", ".join(s.name for s in self.input_specs)
            raise TypeError(f"{self.name} takes {len(self.input_specs)} arguments ({names}), "
                            f"got {len(args)}")
        bound: dict = {}
        for spec, a in zip(self.input_specs, args, strict=True):
            if spec.kind != "tensor":
                if not isinstance(a, (int, float, bool)) or isinstance(a, kiln.Tensor):
                    raise TypeError(f"{self.name}: input {spec.name!r} must be a {spec.kind}, "
                                    f"got {type(a).__name__}")
                continue
            want = f"{spec.dtype.name}[{', '.join(str(d) for d in spec.shape)}]"
            if not isinstance(a, kiln.Tensor):
                raise TypeError(f"{self.name}: input {spec.name!r} must be a tensor {want}, got "
                                f"{type(a).__name__}")
            got = f"{a.dtype.name}{list(a.shape)}"
            if a.dtype != spec.dtype:
                raise TypeError(f"{self.name}: input {spec.name!r} has dtype {a.dtype.name}, "
                                f"expected {spec.dtype.name} (expected {want}, got {got})")
            if a.dim() != len(spec.shape):
                raise ValueError(f"{self.name}: input {spec.name!r} has rank {a.dim()}, "
                                 f"expected {len(spec.shape)} (expected {want}, got {got})")
            for d, (want_d, size) in enumerate(zip(spec.shape, a.shape, strict=True)):
                if isinstance(want_d, int):
                    if size != want_d:
                        raise ValueError(f"{self.name}: input {spec.name!r} has size {size} at "
                                         f"dim {d}, expected {want_d} (expected {want}, got {got})")
                    continue
                if want_d not in spec.ranges:  # an expression: the compiled graph checks it
                    continue
                lo, hi = spec.ranges[want_d]
                if size < lo or (hi is not None and size > hi):
                    raise ValueError(
                        f"{self.name}: input {spec.name!r} dim {d} ({want_d}) is {size}, outside "
                        f"the range [{lo}, {'inf' if hi is None else hi}] (got {got})")
                if bound.setdefault(want_d, (size, spec.name))[0] != size:
                    first_size, first_name = bound[want_d]
                    raise ValueError(
                        f"{self.name}: input {spec.name!r} dim {d} ({want_d}) is {size}, but "
                        f"{want_d} is {first_size} from input {first_name!r}")

    def run(self, *args):
        """Runs the program on the graph parameters (in order); returns the packed outputs."""
        self.check_inputs(args)
        outputs = self._compile()(*args)
        return spec_mod.pack(self._spec, outputs)

    def module(self):
        """A callable equal to the exported function: it takes the graph parameters (the
        function's tensor arguments; Python numbers were specialized into the program)."""
        program = self

        def forward(*args, **kwargs):
            if kwargs:
                names = [s.name for s in program.input_specs]
                args = list(args)
                for name in names[len(args) :]:
                    if name not in kwargs:
                        raise TypeError(f"{program.name}: missing argument {name!r}")
                    args.append(kwargs.pop(name))
                if kwargs:
                    raise TypeError(f"{program.name}: unexpected arguments {sorted(kwargs)}")
            return program.run(*args)

        forward.__name__ = forward.__qualname__ = program.name
        forward.program = program
        return forward
