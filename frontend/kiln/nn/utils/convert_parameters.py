"""parameters_to_vector / vector_to_parameters (torch.nn.utils): a model's parameters as one
flat vector and back, e.g. for second-order methods or evolution strategies."""

from __future__ import annotations

import kiln

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters):
    """All ``parameters`` flattened and concatenated, in order, into one new 1-D tensor."""
    param_device = None
    vec = []
    for param in parameters:
        param_device = _check_param_device(param, param_device)
        vec.append(param.reshape(-1))
    return kiln.cat(vec)


def vector_to_parameters(vec, parameters) -> None:
    """Copies consecutive slices of ``vec`` into ``parameters`` (each slice shaped like its
    parameter). torch rebinds ``param.data`` to views of ``vec``; kiln copies the values in
    place, so the parameters hold the same numbers but do not alias ``vec``."""
    if not isinstance(vec, kiln.Tensor):
        raise TypeError(f"expected kiln.Tensor, but got: {type(vec).__name__}")
    param_device = None
    pointer = 0
    with kiln.no_grad():
        for param in parameters:
            param_device = _check_param_device(param, param_device)
            num_param = param.numel()
            param.copy_(vec[pointer : pointer + num_param].view_as(param))
            pointer += num_param


def _check_param_device(param, old_param_device):
    """-1 for CPU or the CUDA index; raises when parameters sit on different devices."""
    dev = param.device
    this = (dev.index or 0) if dev.type == "cuda" else -1
    if old_param_device is None:
        return this
    if this != old_param_device:
        raise TypeError(
            "Found two parameters on different devices, this is currently not supported."
        )
    return old_param_device


vector_to_parameters._kiln_eager_reason = "writes into the parameters, which compiled code reads"
