"""Sources: where a value the symbolic evaluator read came from, so guards can re-read it.

A source is a path from the frame state (arguments, or locals and stack at a resume point),
from the function's globals or closure, or from an object baked into the compiled entry. Guards
are attached to sources; graph inputs are fetched through them at run time.
"""

from __future__ import annotations

from dataclasses import dataclass


class Source:
    """Base class. Subclasses are frozen dataclasses, so equal paths compare and hash equal."""

    def name(self) -> str:
        raise NotImplementedError

    def guardable(self) -> bool:
        """False for paths rooted at baked objects: what they reach is covered by other guards."""
        return True

    def expr(self, arg_names) -> str | None:
        """A Python expression that re-reads the value inside an entry, or None if baked."""
        return None

    def __str__(self) -> str:
        return self.name()


@dataclass(frozen=True)
class ArgSource(Source):
    """Item `index` of the frame state (a function argument, or a local/stack slot on resume)."""

    index: int
    label: str

    def name(self) -> str:
        return f"L[{self.label!r}]"

    def expr(self, arg_names) -> str | None:
        return arg_names[self.index]


@dataclass(frozen=True)
class GlobalSource(Source):
    key: str

    def name(self) -> str:
        return f"G[{self.key!r}]"

    def expr(self, arg_names) -> str | None:
        return f"_func.__globals__[{self.key!r}]"  # entries receive the function first


@dataclass(frozen=True)
class ClosureSource(Source):
    index: int
    label: str

    def name(self) -> str:
        return f"C[{self.label!r}]"

    def expr(self, arg_names) -> str | None:
        return f"_func.__closure__[{self.index}].cell_contents"


@dataclass(frozen=True)
class BakedSource(Source):
    """An object the compiled entry holds a reference to (a module reached from a guarded root)."""

    label: str

    def name(self) -> str:
        return self.label

    def guardable(self) -> bool:
        return False


@dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    attr: str

    def name(self) -> str:
        return f"{self.base.name()}.{self.attr}"

    def guardable(self) -> bool:
        return self.base.guardable()

    def expr(self, arg_names) -> str | None:
        base = self.base.expr(arg_names)
        return None if base is None else f"{base}.{self.attr}"


# Dict keys that are objects (a module: OpenAI Whisper's kv_cache[self.key]), spelled in entries
# as `_keys[id]`; each stays alive as long as the process (modules outlive their entries).
KEY_OBJECTS: dict = {}


@dataclass(frozen=True)
class ItemSource(Source):
    base: Source
    key: object

    def name(self) -> str:
        if _literal(self.key):
            return f"{self.base.name()}[{self.key!r}]"
        return f"{self.base.name()}[<{type(self.key).__name__} at 0x{id(self.key):x}>]"

    def guardable(self) -> bool:
        return self.base.guardable()

    def expr(self, arg_names) -> str | None:
        base = self.base.expr(arg_names)
        if base is None:
            return None
        if _literal(self.key):
            return f"{base}[{self.key!r}]"
        KEY_OBJECTS[id(self.key)] = self.key
        return f"{base}[_keys[{id(self.key)}]]"


@dataclass(frozen=True, eq=False)
class HeldSource(Source):
    """An object the entry holds and re-reads something of on every call: a baked parameter
    whose `.grad` changes between calls (spelled `_keys[id]`; parameters outlive entries)."""

    obj: object
    label: str

    def name(self) -> str:
        return self.label

    def expr(self, arg_names) -> str | None:
        KEY_OBJECTS[id(self.obj)] = self.obj
        return f"_keys[{id(self.obj)}]"

    def __eq__(self, other) -> bool:
        return isinstance(other, HeldSource) and other.obj is self.obj

    def __hash__(self) -> int:
        return hash(id(self.obj))


def held_container_source(value, holder, label: str, key) -> Source | None:
    """The path to a list or dict kept in `holder` (an inlined function's module globals, or one
    of its closure cells with key None) when nothing else reaches it: the entry holds `holder`
    and re-reads the container on every call, so changes the captured code makes to it (a
    forward hook's `activations[name] = out`) are replayed into the object the call sees. Other
    values keep no path (they are baked, as the function's code is)."""
    if type(value) not in (list, dict):
        return None
    held = HeldSource(holder, f"<{label} of {type(holder).__name__} at 0x{id(holder):x}>")
    return AttrSource(held, "cell_contents") if key is None else ItemSource(held, key)


def _literal(key) -> bool:
    return type(key) in (str, int, float, bool, type(None))


def root_of(source: Source) -> Source:
    while isinstance(source, (AttrSource, ItemSource)):
        source = source.base
    return source
