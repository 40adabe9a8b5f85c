"""Flatten and Unflatten: reshape modules for use inside Sequential."""

from __future__ import annotations

from kiln.nn.modules.module import Module

__all__ = ["Flatten", "Unflatten"]


class Flatten(Module):
    """Flattens dims start_dim..end_dim into one (by default all but the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


def _require_tuple_int(sizes) -> None:
    if isinstance(sizes, (tuple, list)):
        for idx, elem in enumerate(sizes):
            if not isinstance(elem, int):
                raise TypeError(
                    "unflattened_size must be tuple of ints, "
                    f"but found element of type {type(elem).__name__} at pos {idx}"
                )
        return
    raise TypeError(
        f"unflattened_size must be a tuple of ints, but found type {type(sizes).__name__}"
    )


class Unflatten(Module):
    """Splits dim ``dim`` into ``unflattened_size`` (one entry may be -1)."""

    def __init__(self, dim, unflattened_size) -> None:
        super().__init__()
        _require_tuple_int(unflattened_size)
        self.dim = dim
        self.unflattened_size = unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
