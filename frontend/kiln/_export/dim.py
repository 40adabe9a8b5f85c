"""`kiln.Dim`: a named symbolic size of an exported program's inputs, with its range."""

from __future__ import annotations

import keyword
import re

__all__ = ["Dim"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Words of the .kir format that cannot name a size symbol.
_RESERVED = frozenset(
    "max min floordiv mod strided on loc int float bool inf nan true false cpu cuda graph return "
    "b8 u8 i8 i16 i32 i64 f16 bf16 f32 f64".split()
)


class Dim:
    """A dynamic dimension of kiln.export: ``Dim("batch", min=2, max=64)``.

    Each Dim becomes one size symbol of the program, named after it; using the same Dim object
    for several dimensions says they are always equal. `min` is at least 2 because the capture
    specializes sizes 0 and 1 (broadcasting and emptiness depend on them); `max` None means
    unbounded. Both bounds are inclusive.
    """

    __slots__ = ("name", "min", "max")

    def __init__(self, name: str, *, min: int = 2, max: int | None = None) -> None:  # noqa: A002
        if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name) or (
            name in _RESERVED
        ):
            raise ValueError(f"kiln.Dim: {name!r} is not a valid symbol name (an identifier that "
                             "is not a word of the .kir format)")
        if type(min) is not int or (max is not None and type(max) is not int):
            raise TypeError("kiln.Dim: min and max must be ints (max may be None)")
        if min < 2:
            raise ValueError(
                f"kiln.Dim({name!r}): min={min} is not allowed: sizes 0 and 1 are specialized "
                "(the capture treats them as static because broadcasting and emptiness depend "
                "on them), so a dynamic dimension has min >= 2")
        if max is not None and max < min:
            raise ValueError(f"kiln.Dim({name!r}): max={max} is below min={min}")
        self.name, self.min, self.max = name, min, max

    def contains(self, size: int) -> bool:
        return size >= self.min and (self.max is None or size <= self.max)

    def range_text(self) -> str:
        return f"[{self.min}, {'inf' if self.max is None else self.max}]"

    def __repr__(self) -> str:
        return f"Dim({self.name!r}, min={self.min}, max={self.max})"
