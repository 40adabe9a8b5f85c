"""Gradient clipping: clip_grad_norm_, clip_grad_value_ and their parts (torch.nn.utils).

The total norm is computed in torch's two stages: the norm of each gradient (grouped by
device and dtype, as torch groups them), then the norm of those norms, so values (and the
dtype of the result) match torch's. Clipping multiplies every gradient in place by
``min(max_norm / (total_norm + 1e-6), 1)``; the coefficient is a 0-d tensor, so a NaN or
infinite norm propagates into the gradients unless ``error_if_nonfinite`` is set.
``foreach`` is accepted for torch compatibility (torch supports it on every device kiln
has); kiln always runs the per-tensor loop.
"""

from __future__ import annotations

import functools
import types
import warnings

import kiln

__all__ = [
    "clip_grad_norm",
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "get_total_norm",
]


def _no_grad(func):
    """Runs ``func`` under ``kiln.no_grad()``: clipping must not be recorded by autograd."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with kiln.no_grad():
            return func(*args, **kwargs)

    return wrapper


def _as_list(tensors):
    return [tensors] if isinstance(tensors, kiln.Tensor) else list(tensors)


def _group_by_device_and_dtype(tensors):
    """Tensors grouped by (device, dtype), groups in order of first appearance."""
    groups: dict[tuple[str, object], list[kiln.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t._device_str, t.dtype), []).append(t)
    return groups


def _vector_norm(t, norm_type: float):
    return t.norm(p=norm_type)


@_no_grad
def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of all ``tensors`` together, as a 0-d tensor (0.0 for none)."""
    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if len(tensors) == 0:
        return kiln.tensor(0.0)
    first_device = tensors[0]._device_str
    norms = []
    for group in _group_by_device_and_dtype(tensors).values():
        norms.extend(_vector_norm(g, norm_type) for g in group)
    total_norm = _vector_norm(kiln.stack([n.to(first_device) for n in norms]), norm_type)
    if error_if_nonfinite and bool(kiln.logical_or(total_norm.isnan(), total_norm.isinf())):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from "
            "`parameters` is non-finite, so it cannot be clipped. To disable "
            "this error and scale the gradients by the non-finite norm anyway, "
            "set `error_if_nonfinite=False`"
        )
    return total_norm


@_no_grad
def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None) -> None:
    """Scales the parameters' gradients in place by ``min(max_norm / (total_norm + 1e-6),
    1)``; ``total_norm`` comes from ``get_total_norm`` (possibly of other tensors)."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    max_norm = float(max_norm)
    if len(grads) == 0:
        return
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = kiln.clamp(clip_coef, max=1.0)
    for (device, _), group in _group_by_device_and_dtype(grads).items():
        coef = clip_coef_clamped.to(device)
        for g in group:
            g.mul_(coef)


@_no_grad
def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Clips the gradients of ``parameters`` (a tensor or an iterable) so their total
    ``norm_type``-norm (``inf`` for the max-norm) is at most ``max_norm``; returns the total
    norm before clipping as a 0-d tensor. Parameters without a gradient are skipped."""
    if isinstance(parameters, kiln.Tensor):
        parameters = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        parameters = list(parameters)
        if is_generator and len(parameters) == 0:
            warnings.warn(
                "`parameters` is an empty generator, no gradient clipping will occur.",
                stacklevel=3,
            )
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Deprecated spelling of ``clip_grad_norm_`` (warns, as torch does)."""
    warnings.warn(
        "`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
        "`torch.nn.utils.clip_grad_norm_`.",
        FutureWarning,
        stacklevel=2,
    )
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


@_no_grad
def clip_grad_value_(parameters, clip_value, foreach=None) -> None:
    """Clamps every gradient of ``parameters`` in place to ``[-clip_value, clip_value]``."""
    parameters = _as_list(parameters)
    clip_value = float(clip_value)
    grads = [p.grad for p in parameters if p.grad is not None]
    for grad in grads:
        grad.clamp_(min=-clip_value, max=clip_value)
