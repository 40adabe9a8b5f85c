"""Normalization functions of kiln.nn.functional (torch's names, signatures and checks).

The kernels are fused C++ ops (kiln._C.layer_norm, ...); this module adds the argument order of
torch.nn.functional and the input checks torch performs in Python. scaled_dot_product_attention
(a softmax-normalized weighting) lives here too, as the nn area has no attention module of its
own in kiln.nn.functional's layout.
"""

import kiln
from kiln import _C
from kiln._schema import torch_schema

__all__ = [
    "batch_norm",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "normalize",
    "rms_norm",
    "scaled_dot_product_attention",
]


def _numel_per_channel(size, first):
    n = first
    for s in size[2:]:
        n *= s
    return n


def _verify_batch_size(size):
    if _numel_per_channel(size, size[0]) == 1:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size {list(size)}"
        )


def _verify_spatial_size(size):
    if _numel_per_channel(size, 1) == 1:
        raise ValueError(
            f"Expected more than 1 spatial element when training, got input size {list(size)}"
        )


layer_norm = _C._nn.layer_norm  # bound from its ops.def row

rms_norm = _C._nn.rms_norm  # bound from its ops.def row

@torch_schema(
    "group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
    "float eps=1e-05) -> Tensor"
)
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Group normalization of an (N, C, *) input over groups of C / num_groups channels."""
    if input.dim() < 2:
        raise RuntimeError(
            "group_norm: expected at least 2 dimensions for input tensor but received "
            f"{input.dim()}"
        )
    size = list(input.shape)
    if num_groups > 0 and size[1] % num_groups == 0:
        _verify_batch_size([size[0] * size[1] // num_groups, num_groups] + size[2:])
    return _C.group_norm(input, num_groups, weight, bias, eps)


@torch_schema(
    "batch_norm(Tensor input, Tensor? running_mean, Tensor? running_var, "
    "Tensor? weight=None, Tensor? bias=None, bool training=False, float momentum=0.1, "
    "float eps=1e-05) -> Tensor"
)
def batch_norm(
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training=False,
    momentum=0.1,
    eps=1e-5,
):
    """Batch normalization; in training mode updates running_mean/running_var in place."""
    if training:
        _verify_batch_size(list(input.shape))
    return _C.batch_norm(
        input, weight, bias, running_mean, running_var, training, momentum, eps, False
    )


@torch_schema(
    "instance_norm(Tensor input, Tensor? running_mean=None, Tensor? running_var=None, "
    "Tensor? weight=None, Tensor? bias=None, bool use_input_stats=True, float momentum=0.1, "
    "float eps=1e-05) -> Tensor"
)
def instance_norm(
    input,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats=True,
    momentum=0.1,
    eps=1e-5,
):
    """Instance normalization: per-(sample, channel) statistics of an (N, C, *) input. With
    autograd on, the normalization is written in differentiable ops (the kernel updates the
    running statistics, as it does without autograd)."""
    if use_input_stats:
        _verify_spatial_size(list(input.shape))
    tracked = [t for t in (input, weight, bias) if t is not None and t.requires_grad]
    if not (use_input_stats and tracked and kiln.is_grad_enabled()):
        return _C.instance_norm(
            input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, False
        )
    if running_mean is not None or running_var is not None:
        with kiln.no_grad():
            _C.instance_norm(input.detach(), None, None, running_mean, running_var, True,
                             momentum, eps, False)  # fmt: skip
    dims = tuple(range(2, input.dim()))
    mean = input.mean(dims, keepdim=True)
    var = input.var(dims, keepdim=True, correction=0)
    out = (input - mean) * (var + eps).rsqrt()
    per_channel = (1, input.shape[1]) + (1,) * (input.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


@torch_schema(
    "normalize(Tensor input, float p=2.0, int dim=1, float eps=1e-12, Tensor? out=None) -> Tensor"
)
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """``input / max(||input||_p, eps)`` along ``dim``."""
    result = _C._normalize(input, float(p), dim, eps)
    if out is None:
        return result
    return out.copy_(result)


@torch_schema(
    "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
    "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, float? scale=None, "
    "bool enable_gqa=False) -> Tensor"
)
def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    """softmax(query @ key^T * scale + mask) @ value, fused per (batch, head).

    Like torch's, dropout_p > 0 applies dropout to the attention probabilities whatever the
    module's training flag (callers pass 0.0 in evaluation); it draws from kiln's generator.
    """
    return _C._scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa
    )
