"""kiln.nn.utils: gradient clipping and parameter/vector conversion (torch.nn.utils)."""

# Submodules, importable as attributes as in torch.nn.utils.
from kiln.nn.utils import parametrizations, parametrize, rnn, stateless  # noqa: F401
from kiln.nn.utils.clip_grad import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)
from kiln.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from kiln.nn.utils.fusion import (
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
)
from kiln.nn.utils.init import skip_init
from kiln.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm
from kiln.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = [
    "clip_grad_norm",
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
    "get_total_norm",
    "parameters_to_vector",
    "parametrizations",
    "parametrize",
    "remove_spectral_norm",
    "remove_weight_norm",
    "skip_init",
    "spectral_norm",
    "stateless",
    "vector_to_parameters",
    "weight_norm",
]
