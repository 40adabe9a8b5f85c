"""kiln.compiler: control of the capture frontend (torch.compiler's spelling)."""

from kiln._capture.compile import allow_in_graph, disable, reset
from kiln._capture.convert_frame import CaptureError


def wrap_numpy(fn):
    """NumPy code taking and returning kiln tensors (see kiln._numpy.wrap_numpy)."""
    from kiln._numpy import wrap_numpy as wrap

    return wrap(fn)


__all__ = ["CaptureError", "allow_in_graph", "disable", "reset", "wrap_numpy"]
