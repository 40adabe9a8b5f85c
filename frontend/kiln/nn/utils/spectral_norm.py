"""The hook-based spectral normalization (torch.nn.utils.spectral_norm), which torch keeps
alongside ``parametrizations.spectral_norm`` and which GAN code and checkpoints still use.

``weight`` becomes the parameter ``weight_orig`` plus the buffers ``weight_u``/``weight_v``
(singular-vector estimates); a forward pre-hook sets ``weight = weight_orig / sigma`` as a
plain attribute, running the power iteration first in training mode.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln.nn import functional as F
from kiln.nn.modules.module import Module
from kiln.nn.parameter import Parameter
from kiln.nn.utils._common import (
    add_load_state_dict_pre_hook,
    add_state_dict_hook,
    is_conv_transpose,
)

__all__ = [
    "SpectralNorm",
    "SpectralNormLoadStateDictPreHook",
    "SpectralNormStateDictHook",
    "remove_spectral_norm",
    "spectral_norm",
]


def _pinverse(mat):
    """Moore-Penrose pseudo-inverse (only needed to convert version-0 checkpoints)."""
    inv = np.linalg.pinv(mat.detach().cpu().numpy())
    return kiln.from_numpy(np.ascontiguousarray(inv)).to(mat.dtype)


class SpectralNorm:
    """The forward pre-hook of ``spectral_norm``.

    Invariant before and after each forward: ``u = normalize(W_orig @ v)``. Version 1 (the
    current one) stores ``v`` as a buffer and computes ``W`` from ``u``, ``W_orig`` and ``v``
    in eval mode too, instead of keeping ``W`` in the state.
    """

    _version: int = 1
    name: str
    dim: int
    n_power_iterations: int
    eps: float

    def __init__(
        self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12
    ) -> None:
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but "
                f"got n_power_iterations={n_power_iterations}"
            )
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight):
        weight_mat = weight
        if self.dim != 0:
            weight_mat = weight_mat.permute(
                self.dim, *[d for d in range(weight_mat.dim()) if d != self.dim]
            )
        return weight_mat.reshape(weight_mat.size(0), -1)

    def compute_weight(self, module: Module, do_power_iteration: bool):
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            # In place (out=), so module replicas sharing the buffers see the update; then
            # cloned, so a graph from an earlier forward is not invalidated by the next one.
            with kiln.no_grad():
                for _ in range(self.n_power_iterations):
                    v = F.normalize(kiln.mv(weight_mat.t(), u), dim=0, eps=self.eps, out=v)
                    u = F.normalize(kiln.mv(weight_mat, v), dim=0, eps=self.eps, out=u)
                u = u.clone()
                v = v.clone()
        sigma = kiln.dot(u, kiln.mv(weight_mat, v))
        return weight / sigma

    def remove(self, module: Module) -> None:
        with kiln.no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    def _solve_v_and_rescale(self, weight_mat, u, target_sigma):
        # A v with u = normalize(W @ v) and u @ W @ v = sigma (pinverse in case W^T W is
        # singular).
        v = kiln.linalg.multi_dot(
            [_pinverse(weight_mat.t().mm(weight_mat)), weight_mat.t(), u.unsqueeze(1)]
        ).squeeze(1)
        return v.mul_(target_sigma / kiln.dot(u, kiln.mv(weight_mat, v)))

    @staticmethod
    def apply(
        module: Module, name: str, n_power_iterations: int, dim: int, eps: float
    ) -> SpectralNorm:
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(
                    f"Cannot register two spectral_norm hooks on the same parameter {name}"
                )
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        with kiln.no_grad():
            weight_mat = fn.reshape_weight_to_matrix(weight)
            h, w = weight_mat.size()
            u = F.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=fn.eps)
            v = F.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        # Code may read module.weight before the first forward (e.g. custom init), so it stays
        # available, as a plain attribute rather than a parameter.
        setattr(module, fn.name, weight.data)
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        add_state_dict_hook(module, SpectralNormStateDictHook(fn))
        add_load_state_dict_pre_hook(module, SpectralNormLoadStateDictPreHook(fn))
        return fn


class SpectralNormLoadStateDictPreHook:
    """Upgrades version-0 checkpoints (which stored ``weight`` and no ``weight_v``) on load."""

    def __init__(self, fn) -> None:
        self.fn = fn

    # A version-0 state (after at least one training forward) has u = normalize(W_orig @ v)
    # and W = W_orig / sigma with sigma = u @ W_orig @ v; v is recovered by solving
    # W_orig @ x = u and rescaling x so that u @ W_orig @ v matches W_orig / W.
    def __call__(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        fn = self.fn
        version = local_metadata.get("spectral_norm", {}).get(fn.name + ".version", None)
        if version is not None and version >= 1:
            return
        weight_key = prefix + fn.name
        if (
            version is None
            and all(weight_key + s in state_dict for s in ("_orig", "_u", "_v"))
            and weight_key not in state_dict
        ):
            # A current-format state whose metadata got lost (e.g. built by hand).
            return
        has_missing_keys = False
        for suffix in ("_orig", "", "_u"):
            key = weight_key + suffix
            if key not in state_dict:
                has_missing_keys = True
                if strict:
                    missing_keys.append(key)
        if has_missing_keys:
            return
        with kiln.no_grad():
            weight_orig = state_dict[weight_key + "_orig"]
            weight = state_dict.pop(weight_key)
            sigma = (weight_orig / weight).mean()
            weight_mat = fn.reshape_weight_to_matrix(weight_orig)
            u = state_dict[weight_key + "_u"]
            state_dict[weight_key + "_v"] = fn._solve_v_and_rescale(weight_mat, u, sigma)


class SpectralNormStateDictHook:
    """Records the format version in the state_dict metadata, for the load pre-hook."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self, module, state_dict, prefix, local_metadata) -> None:
        if "spectral_norm" not in local_metadata:
            local_metadata["spectral_norm"] = {}
        key = self.fn.name + ".version"
        if key in local_metadata["spectral_norm"]:
            raise RuntimeError(f"Unexpected key in metadata['spectral_norm']: {key}")
        local_metadata["spectral_norm"][key] = self.fn._version


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> Module:
    """Rescales ``module.<name>`` by its largest singular value before every forward.

    The estimates ``<name>_u``/``<name>_v`` (buffers) advance ``n_power_iterations`` power
    iteration steps per forward in training mode only. ``dim`` is the output dimension
    (default 0, 1 for transposed convolutions).
    """
    if dim is None:
        dim = 1 if is_conv_transpose(module) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Replaces ``<name>_orig``/``_u``/``_v`` by a ``<name>`` parameter holding the current
    normalized weight (no further power iteration) and drops the hooks."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, SpectralNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            break
    else:
        raise ValueError(f"spectral_norm of '{name}' not found in {module}")
    for k, hook in module._state_dict_hooks.items():
        if isinstance(hook, SpectralNormStateDictHook) and hook.fn.name == name:
            del module._state_dict_hooks[k]
            break
    for k, hook in module._load_state_dict_pre_hooks.items():
        if isinstance(hook, SpectralNormLoadStateDictPreHook) and hook.fn.name == name:
            del module._load_state_dict_pre_hooks[k]
            break
    return module
