"""Ready-made parametrizations (torch.nn.utils.parametrizations): weight_norm, spectral_norm
and orthogonal, each registered through ``parametrize.register_parametrization``.

The parametrized weight is recomputed on every access (use ``parametrize.cached()`` to compute
it once per forward). ``orthogonal`` supports torch's three maps; kiln has no
``linalg.matrix_exp``/``solve``/``householder_product``, so they come from
``_matrix_functions`` (a scaling-and-squaring Taylor exponential, an unpivoted Gauss-Jordan
solve valid for the Cayley map's ``I - A/2``, and a reflector-by-reflector product).
"""

from __future__ import annotations

from enum import Enum, auto

import kiln
from kiln.nn import functional as F
from kiln.nn.modules.module import Module
from kiln.nn.utils import parametrize
from kiln.nn.utils._common import (
    add_load_state_dict_pre_hook,
    is_conv_transpose,
    norm_except_dim,
    weight_norm_from,
)
from kiln.nn.utils._matrix_functions import (
    geqrf,
    householder_product,
    matrix_exp,
    solve_positive_real,
)

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


def _is_orthogonal(q) -> bool:
    n, k = q.size(-2), q.size(-1)
    eye = kiln.eye(k, dtype=q.dtype, device=q.device)
    eps = 10.0 * n * kiln.finfo(q.dtype).eps
    return bool(kiln.allclose(q.mH @ q, eye, atol=eps))


def _make_orthogonal(a):
    """The Q of ``a = QR`` (``a`` tall) with R's diagonal made non-negative, so the result is
    unique."""
    x, tau = geqrf(a)
    q = householder_product(x, tau)
    return q * x.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map: _OrthMaps, *, use_trivialization=True) -> None:
        super().__init__()
        # Complex reflectors below the diagonal carry too few parameters to cover the unitary
        # matrices, so torch refuses this combination.
        if weight.is_complex() and orthogonal_map == _OrthMaps.householder:
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, x):
        n, k = x.size(-2), x.size(-1)
        transposed = n < k
        if transposed:
            x = x.mT
            n, k = k, n
        # x is tall from here on.
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            # Only the lower triangle (n*k - k(k-1)/2 numbers) is free.
            x = x.tril()
            if n != k:
                x = kiln.cat([x, x.new_zeros(n, n - k).expand(*x.shape[:-2], -1, -1)], dim=-1)
            a = x - x.mH
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                q = matrix_exp(a)
            else:
                # The Cayley retraction (I - A/2)^{-1} (I + A/2).
                eye = kiln.eye(n, dtype=a.dtype, device=a.device)
                q = solve_positive_real(eye - 0.5 * a, eye + 0.5 * a)
            if n != k:
                q = q[..., :k]
        else:
            a = x.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (a * a).sum(dim=-2))
            q = householder_product(a, tau)
            # x's diagonal holds signs (+-1); as in torch it is truncated to int, so it is
            # neither differentiated nor updated (detached: kiln's int cast keeps the graph).
            q = q * x.diagonal(dim1=-2, dim2=-1).detach().int().unsqueeze(-2)
        if hasattr(self, "base"):
            q = self.base @ q
        if transposed:
            q = q.mT
        return q

    def right_inverse(self, q):
        with kiln.no_grad():
            return self._right_inverse(q)

    def _right_inverse(self, q):
        if q.shape != self.shape:
            raise ValueError(
                f"Expected a matrix or batch of matrices of shape {self.shape}. "
                f"Got a tensor of shape {q.shape}."
            )
        q_init = q
        n, k = q.size(-2), q.size(-1)
        transpose = n < k
        if transpose:
            q = q.mT
            n, k = k, n
        if not hasattr(self, "base"):
            # Without the trivialization only the Householder map has a known inverse.
            if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                raise NotImplementedError(
                    "It is not possible to assign to the matrix exponential "
                    "or the Cayley parametrizations when use_trivialization=False."
                )
            a, tau = geqrf(q)
            # Signs on the diagonal fix the QR's sign ambiguity; LAPACK gives tau == 0 exactly
            # for a reflection it skipped, whose sign flips.
            diag = a.diagonal(dim1=-2, dim2=-1)
            diag.sign_()
            diag.copy_(kiln.where(tau == 0.0, -diag, diag))
            return a.mT if transpose else a
        if n == k:
            q = q.clone() if _is_orthogonal(q) else _make_orthogonal(q)
        else:
            # Complete q to a full n x n orthogonal matrix.
            extra = kiln.randn(*q.shape[:-2], n, n - k, dtype=q.dtype, device=q.device)
            q = _make_orthogonal(kiln.cat([q, extra], dim=-1))
        self.base = q
        # -Id, so that the Householder map gives householder(zeros) == eye.
        neg_id = kiln.zeros_like(q_init)
        neg_id.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
        return neg_id


def orthogonal(
    module: Module,
    name: str = "weight",
    orthogonal_map: str | None = None,
    *,
    use_trivialization: bool = True,
) -> Module:
    """Keeps ``module.<name>`` (a matrix or batch of matrices) orthogonal: orthonormal columns
    if tall, rows if wide.

    ``orthogonal_map`` is ``"matrix_exp"``, ``"cayley"`` or ``"householder"`` (default:
    ``matrix_exp`` for square or complex matrices, ``householder`` otherwise). With
    ``use_trivialization`` a base matrix is stored under
    ``module.parametrizations.<name>[0].base`` (torch's dynamic trivialization).
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, kiln.Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    # The 1-d case (maps on the sphere) is left out, as in torch.
    if weight.ndim < 2:
        raise ValueError(
            f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions."
        )
    if orthogonal_map is None:
        square = weight.size(-2) == weight.size(-1)
        orthogonal_map = "matrix_exp" if square or weight.is_complex() else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError(
            'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
            f"Got: {orthogonal_map}"
        )
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return weight_norm_from(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Splits ``module.<name>`` into a magnitude ``original0`` (its norm over every dim but
    ``dim``; over everything with ``dim=None``) and a direction ``original1``, recombined as
    ``g * v / ||v||`` on access.

    Checkpoints of the hook-based ``weight_norm`` (``<name>_g``/``<name>_v`` keys) still load:
    a load_state_dict pre-hook renames them.
    """
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def _weight_norm_compat_hook(
        state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    add_load_state_dict_pre_hook(module, _weight_norm_compat_hook)
    return module


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12):
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(
                "Dimension out of range (expected to be in range of "
                f"[-{ndim}, {ndim - 1}] but got {dim})"
            )
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but "
                f"got n_power_iterations={n_power_iterations}"
            )
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            # A vector needs no estimate (forward normalizes it exactly).
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight)
            h, w = weight_mat.size()
            u = weight_mat.new_empty(h).normal_(0, 1)
            v = weight_mat.new_empty(w).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            # Start from good estimates of the singular vectors.
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight):
        if weight.ndim <= 1:
            raise AssertionError(
                f"Expected weight to have more than 1 dimension, got {weight.ndim}"
            )
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.dim()) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations: int) -> None:
        # u and v are updated in place so module replicas sharing the buffers see the update.
        with kiln.no_grad():
            for _ in range(n_power_iterations):
                self._u = F.normalize(
                    kiln.mv(weight_mat, self._v), dim=0, eps=self.eps, out=self._u
                )
                self._v = F.normalize(
                    kiln.mv(weight_mat.mH, self._u), dim=0, eps=self.eps, out=self._v
                )

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        # Clones, so a graph built in an earlier forward (e.g. D(real) - D(fake) in a GAN) does
        # not see the next in-place power iteration.
        u = self._u.clone()
        v = self._v.clone()
        sigma = kiln.vdot(u, kiln.mv(weight_mat, v))
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> Module:
    """Divides ``module.<name>`` by its largest singular value, estimated by power iteration.

    The singular-vector estimates ``_u``/``_v`` (buffers of
    ``module.parametrizations.<name>[0]``) advance ``n_power_iterations`` steps on every access
    in training mode and stay fixed in eval mode. ``dim`` is the output dimension (default 0,
    1 for transposed convolutions).
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, kiln.Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if is_conv_transpose(module) else 0
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps)
    )
    return module
