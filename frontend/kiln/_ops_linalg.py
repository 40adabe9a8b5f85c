"""_ops_linalg: Python-level ops of this area (see kiln/_ops.py).

einsum's argument forms, and the torch-namespace pooling functions (kiln.max_pool2d, ...),
which are thin wrappers over rank-generic C++ bindings.
"""

from kiln import _C
from kiln._einsum_grad import einsum as _einsum

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_max_pool1d",
    "avg_pool1d",
    "einsum",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
]

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _sublist_to_subscripts(sublist):
    out = []
    for s in sublist:
        if s is Ellipsis:
            out.append("...")
        elif isinstance(s, int) and 0 <= s < len(_LETTERS):
            out.append(_LETTERS[s])
        else:
            raise ValueError(
                f"einsum(): expected subscript to be within the range [0, 52), but got {s}"
            )
    return "".join(out)


def einsum(*args):
    """torch.einsum(equation, *operands), also einsum(equation, [operands]) and the sublist
    form einsum(op1, [0, 1], op2, [1, 2], [0, 2])."""
    if not args:
        raise TypeError("einsum(): must specify the equation string and at least one operand")
    if isinstance(args[0], str):
        equation, operands = args[0], args[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        return _einsum(equation, list(operands))
    operands = list(args[0::2])
    sublists = list(args[1::2])
    output = None
    if len(operands) > len(sublists):
        output = operands.pop()
        if not isinstance(output, (list, tuple)):
            raise TypeError("einsum(): expected each operand to be followed by its sublist")
    equation = ",".join(_sublist_to_subscripts(s) for s in sublists)
    if output is not None:
        equation += "->" + _sublist_to_subscripts(output)
    return _einsum(equation, operands)


def _adaptive_size(output_size, nd, op):
    """An int, or a sequence of ints/None (None keeps the input size), as nd entries."""
    if isinstance(output_size, int):
        return [output_size] * nd
    size = list(output_size)
    if len(size) == 1 and nd > 1:
        size = size * nd
    if len(size) != nd:
        raise RuntimeError(
            f"{op}: output_size must be {nd}, but got {len(size)} values: {output_size}"
        )
    return size


def max_pool1d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):  # noqa: A002
    """torch.max_pool1d over [N, C, L] or [C, L]."""
    return _C._max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):  # noqa: A002
    """torch.max_pool2d over [N, C, H, W] or [C, H, W]."""
    return _C._max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):  # noqa: A002
    """torch.max_pool3d over [N, C, D, H, W] or [C, D, H, W]."""
    return _C._max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):  # noqa: A002
    """torch.avg_pool1d over [N, C, L] or [C, L]."""
    return _C._avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def adaptive_avg_pool1d(input, output_size):  # noqa: A002
    """torch.adaptive_avg_pool1d over [N, C, L] or [C, L]."""
    return _C._adaptive_avg_pool(1, input, _adaptive_size(output_size, 1, "adaptive_avg_pool1d"))


def adaptive_max_pool1d(input, output_size, return_indices=False):  # noqa: A002
    """adaptive_max_pool1d: values, or (values, indices) when return_indices."""
    size = _adaptive_size(output_size, 1, "adaptive_max_pool1d")
    return _C._adaptive_max_pool(1, input, size, return_indices)
