"""LocalResponseNorm and SyncBatchNorm (torch.nn's)."""

from __future__ import annotations

import kiln
from kiln import distributed
from kiln.nn import functional as F
from kiln.nn._sync_batch_norm import SyncBatchNormFunction
from kiln.nn.modules.batchnorm import _BatchNorm
from kiln.nn.modules.module import Module

__all__ = ["LocalResponseNorm", "SyncBatchNorm"]


class LocalResponseNorm(Module):
    """Divides each channel by (k + alpha * mean of the squares of ``size`` neighbouring
    channels)^beta."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class SyncBatchNorm(_BatchNorm):
    """Batch norm over (N, C, *) input whose training statistics are those of the whole batch
    over the processes of ``process_group`` (the world by default; kiln/nn/_sync_batch_norm.py);
    in one process, and in evaluation, it normalizes as BatchNorm does."""

    def __init__(
        self,
        num_features,
        eps=1e-5,
        momentum=0.1,
        affine=True,
        track_running_stats=True,
        process_group=None,
        device=None,
        dtype=None,
        *,
        bias=True,
    ) -> None:
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
        )
        self.process_group = process_group

    def _check_input_dim(self, input) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _check_non_zero_input_channels(self, input) -> None:
        if input.size(1) == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")

    def _synchronized(self) -> bool:
        # The world size as init_process_group recorded it: a read that kiln.compile captures,
        # where calling distributed.is_initialized() would break the graph.
        if not self.training or distributed._WORLD.get("size", 1) == 1:
            return False
        return self.process_group is None or self.process_group.size() > 1

    def forward(self, input):
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        if not self._synchronized():
            return super().forward(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        out, mean, var = SyncBatchNormFunction.apply(input, self.weight, self.bias, self.eps,
                                                     self.process_group)  # fmt: skip
        if self.track_running_stats and self.running_mean is not None:
            with kiln.no_grad():
                self.running_mean.mul_(1 - factor).add_(mean * factor)
                self.running_var.mul_(1 - factor).add_(var * factor)
        return out

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every BatchNorm*d in it (itself included) replaced by a SyncBatchNorm
        sharing its parameters and running statistics."""
        module_output = module
        if isinstance(module, _BatchNorm):
            module_output = cls(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_group,
                bias=module.bias is not None,
            )
            if module.affine:
                with kiln.no_grad():
                    module_output.weight = module.weight
                    module_output.bias = module.bias
            module_output.running_mean = module.running_mean
            module_output.running_var = module.running_var
            module_output.num_batches_tracked = module.num_batches_tracked
            module_output.training = module.training
            if hasattr(module, "qconfig"):
                module_output.qconfig = module.qconfig
        for name, child in module.named_children():
            module_output.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        del module
        return module_output
