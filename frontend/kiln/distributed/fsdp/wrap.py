"""Auto-wrap policies (torch.distributed.fsdp.wrap): which submodules become FSDP units of their
own. A policy is called as ``policy(module=m, recurse=..., nonwrapped_numel=n)`` and says
whether to descend into ``m`` (``recurse=True``) or whether to wrap it (``recurse=False``)."""

from __future__ import annotations

__all__ = ["ModuleWrapPolicy", "size_based_auto_wrap_policy", "transformer_auto_wrap_policy"]


class ModuleWrapPolicy:
    """Wraps every submodule that is an instance of one of `module_classes`."""

    def __init__(self, module_classes):
        self._classes = tuple(module_classes)

    def __call__(self, module, recurse: bool, nonwrapped_numel: int = 0) -> bool:
        return True if recurse else isinstance(module, self._classes)


def transformer_auto_wrap_policy(module, recurse: bool, nonwrapped_numel: int = 0,
                                 transformer_layer_cls=()) -> bool:  # fmt: skip
    """Wraps the transformer layers (`transformer_layer_cls`, a set of classes); use it through
    ``functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})``."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module, recurse: bool, nonwrapped_numel: int,
                                min_num_params: int = int(1e8), force_leaf_modules=None,
                                exclude_wrap_modules=None) -> bool:  # fmt: skip
    """Wraps a submodule once the parameters not yet in a unit number at least
    `min_num_params`."""
    if recurse:
        return not isinstance(module, tuple(force_leaf_modules or ()))
    if isinstance(module, tuple(exclude_wrap_modules or ())):
        return False
    return nonwrapped_numel >= min_num_params
