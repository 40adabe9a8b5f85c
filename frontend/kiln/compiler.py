"""kiln.compiler: control of the capture frontend (torch.compiler's spelling)."""

from kiln._capture.compile import allow_in_graph, disable, reset
from kiln._capture.convert_frame import CaptureError


def is_compiling() -> bool:
    """True inside code kiln.compile captures (a constant of the graph), False when run
    eagerly."""
    return False


is_compiling._kiln_value_in_capture = True
is_dynamo_compiling = is_compiling


def wrap_numpy(fn):
    """NumPy code taking and returning kiln tensors (see kiln._numpy.wrap_numpy)."""
    from kiln._numpy import wrap_numpy as wrap

    return wrap(fn)


__all__ = ["CaptureError", "allow_in_graph", "disable", "is_compiling", "is_dynamo_compiling",
           "reset", "wrap_numpy"]
