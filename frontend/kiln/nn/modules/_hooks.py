"""RemovableHandle: what Module.register_*_hook returns (torch.utils.hooks.RemovableHandle)."""

from __future__ import annotations

import itertools
import weakref
from typing import Self

__all__ = ["RemovableHandle"]


class RemovableHandle:
    """A handle that removes a hook from the dict(s) it was registered in.

    Holds the dicts weakly so a handle never keeps a module's hook tables alive; usable as a
    context manager that removes the hook on exit.
    """

    _next_id = itertools.count()

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = next(RemovableHandle._next_id)
        if extra_dict is None:
            extra_dict = []
        elif isinstance(extra_dict, dict):
            extra_dict = [extra_dict]
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extra_dict)

    def remove(self) -> None:
        """Removes the hook; removing twice is harmless."""
        hooks = self.hooks_dict_ref()
        if hooks is not None and self.id in hooks:
            del hooks[self.id]
        for ref in self.extra_dict_ref:
            extra = ref()
            if extra is not None and self.id in extra:
                del extra[self.id]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
