"""Ahead-of-time export: kiln.export, ExportedProgram, kiln.load_exported (see frontend/README)."""

from kiln._export.capture import ExportError
from kiln._export.dim import Dim
from kiln._export.load import load_exported
from kiln._export.program import ExportedProgram, InputSpec, OutputSpec


def export(fn_or_module, example_args, *, dynamic_shapes=None) -> ExportedProgram:
    """Captures `fn_or_module` called on `example_args` (a tuple) as one full graph.

    A graph break is a CaptureError naming the reason and the source line. `dynamic_shapes`
    maps argument names (or positions, as a tuple/list) to ``{dim: kiln.Dim(...)}``; every other
    size is static. Module parameters and buffers become the program's weights, named as in
    ``named_parameters()`` / ``named_buffers()``.
    """
    from kiln._export.capture import capture_program

    text, weights, name = capture_program(fn_or_module, example_args, dynamic_shapes)
    return ExportedProgram(text, weights, name)


__all__ = ["Dim", "ExportError", "ExportedProgram", "InputSpec", "OutputSpec", "export",
           "load_exported"]
