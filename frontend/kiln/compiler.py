"""kiln.compiler: control of the capture frontend (torch.compiler's spelling)."""

from kiln._capture.compile import allow_in_graph, disable, reset
from kiln._capture.convert_frame import CaptureError

__all__ = ["CaptureError", "allow_in_graph", "disable", "reset"]
