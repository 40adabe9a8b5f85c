"""Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict.

Children are registered under their index ("0", "1", ...) or key, which is what gives
``features.0.weight``-style parameter names identical to torch's.
"""

from __future__ import annotations

import operator
from collections import OrderedDict, abc
from itertools import chain, islice

import kiln
from kiln.nn.modules.module import Module, _addindent
from kiln.nn.parameter import Parameter

__all__ = ["ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]


def _abs_index(idx, size: int) -> int:
    idx = operator.index(idx)
    if not -size <= idx < size:
        raise IndexError(f"index {idx} is out of range")
    return idx + size if idx < 0 else idx


def _renumber(module: Module) -> None:
    """Re-keys a list-like container's children 0..n-1 after a deletion."""
    values = list(module._modules.values())
    object.__setattr__(module, "_modules", OrderedDict((str(i), m) for i, m in enumerate(values)))


class Sequential(Module):
    """Runs its children in order, feeding each one's output to the next.

    ``Sequential(m0, m1, ...)`` names children "0", "1", ...; ``Sequential(OrderedDict)`` uses
    the dict's keys.
    """

    def __init__(self, *args) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    def _key_at(self, idx):
        keys = self._modules.keys()
        return next(islice(keys, _abs_index(idx, len(self)), None))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._key_at(idx)]

    def __setitem__(self, idx, module) -> None:
        setattr(self, self._key_at(idx), module)

    def __delitem__(self, idx) -> None:
        if isinstance(idx, slice):
            for key in list(self._modules.keys())[idx]:
                delattr(self, key)
        else:
            delattr(self, self._key_at(idx))
        _renumber(self)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError(  # noqa: TRY004 - torch raises ValueError here
                "add operator supports only objects "
                f"of Sequential class, but {type(other)!s} is given."
            )
        ret = Sequential()
        for layer in chain(self, other):
            ret.append(layer)
        return ret

    def __mul__(self, other):
        if not isinstance(other, int):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        combined = Sequential()
        for offset, module in enumerate(m for _ in range(other) for m in self):
            combined.add_module(str(offset), module)
        return combined

    __rmul__ = __mul__

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]

    def append(self, module):
        """Adds ``module`` at the end."""
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index, module):
        """Inserts ``module`` before position ``index``."""
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")  # noqa: TRY004
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        index = index + n if index < 0 else index
        for i in range(n, index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module
        return self

    def extend(self, sequential):
        """Appends every module of ``sequential``."""
        for layer in sequential:
            self.append(layer)
        return self

    def pop(self, key):
        """Removes and returns the module at ``key``."""
        v = self[key]
        del self[key]
        return v

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):
    """A list of submodules, registered under "0", "1", ... (no forward of its own)."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self += modules

    def _str_index(self, idx) -> str:
        return str(_abs_index(idx, len(self)))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[self._str_index(idx)]

    def __setitem__(self, idx, module) -> None:
        setattr(self, self._str_index(idx), module)

    def __delitem__(self, idx) -> None:
        if isinstance(idx, slice):
            for k in range(len(self._modules))[idx]:
                delattr(self, str(k))
        else:
            delattr(self, self._str_index(idx))
        _renumber(self)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        combined = ModuleList()
        for i, module in enumerate(chain(self, other)):
            combined.add_module(str(i), module)
        return combined

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]

    def __repr__(self) -> str:
        # Runs of identical children print once, as "(i-j): n x Child(...)", like torch.
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        runs = [[0, 0, reprs[0]]]
        for i, r in enumerate(reprs[1:], 1):
            if r == runs[-1][2]:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = []
        for start, end, text in runs:
            line = f"({start}): {text}"
            if start != end:
                line = f"({start}-{end}): {end - start + 1} x {text}"
            lines.append(_addindent(line, 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    def insert(self, index, module) -> None:
        """Inserts ``module`` before position ``index``."""
        for i in range(len(self._modules), index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module

    def append(self, module):
        """Adds ``module`` at the end."""
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key):
        """Removes and returns the module at ``key``."""
        v = self[key]
        del self[key]
        return v

    def extend(self, modules):
        """Appends every module of the iterable ``modules``."""
        if not isinstance(modules, abc.Iterable):
            raise TypeError(
                "ModuleList.extend should be called with an iterable, but got "
                + type(modules).__name__
            )
        offset = len(self)
        for i, module in enumerate(modules):
            self.add_module(str(offset + i), module)
        return self


def _pairs(container, update_name: str, mapping_types):
    """(key, value) pairs of a mapping or an iterable of pairs, validated like torch's update."""
    if not isinstance(container, abc.Iterable):
        raise TypeError(
            f"{update_name}.update should be called with an iterable of key/value pairs, "
            f"but got {type(container).__name__}"
        )
    if isinstance(container, mapping_types):
        return list(container.items())
    if isinstance(container, abc.Mapping):
        return list(container.items())
    pairs = []
    for j, p in enumerate(container):
        if not isinstance(p, abc.Iterable):
            raise TypeError(
                f"{update_name} update sequence element #{j} should be Iterable; is"
                + type(p).__name__
            )
        if len(p) != 2:
            raise ValueError(
                f"{update_name} update sequence element #{j} has length {len(p)}; 2 is required"
            )
        pairs.append((p[0], p[1]))
    return pairs


class ModuleDict(Module):
    """An ordered dict of submodules, registered under their keys."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def clear(self) -> None:
        """Removes every module."""
        self._modules.clear()

    def pop(self, key):
        """Removes and returns the module under ``key``."""
        v = self[key]
        del self[key]
        return v

    def keys(self):
        """The keys, in insertion order."""
        return self._modules.keys()

    def items(self):
        """(key, module) pairs, in insertion order."""
        return self._modules.items()

    def values(self):
        """The modules, in insertion order."""
        return self._modules.values()

    def update(self, modules) -> None:
        """Adds (or replaces) modules from a mapping or an iterable of (key, module) pairs."""
        for key, module in _pairs(modules, "ModuleDict", (OrderedDict, ModuleDict)):
            self[key] = module


def _param_line(key, p) -> str:
    if isinstance(p, kiln.Tensor):
        size = "x".join(str(s) for s in p.size())
        kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
        return f"  ({key}): {kind} containing: [{p.dtype} of size {size}]"
    return f"  ({key}): Object of type: {type(p).__name__}"


class ParameterList(Module):
    """A list of Parameters (plain tensors are wrapped in Parameter), registered "0", "1", ..."""

    def __init__(self, values=None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self += values

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            out = type(self)()
            for i in range(*idx.indices(len(self))):
                out.append(self[i])
            return out
        return getattr(self, str(_abs_index(idx, len(self))))

    def __setitem__(self, idx, param) -> None:
        key = str(_abs_index(idx, len(self)))
        if isinstance(param, kiln.Tensor) and not isinstance(param, Parameter):
            param = Parameter(param)
        setattr(self, key, param)

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        return iter(self[i] for i in range(len(self)))

    def __iadd__(self, parameters):
        return self.extend(parameters)

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]

    def append(self, value):
        """Adds ``value`` at the end."""
        new_idx = len(self)
        self._size += 1
        self[new_idx] = value
        return self

    def extend(self, values):
        """Appends every value of the iterable ``values``."""
        if not isinstance(values, abc.Iterable) or isinstance(values, kiln.Tensor):
            raise TypeError(
                "ParameterList.extend should be called with an iterable, but got "
                + type(values).__name__
            )
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(_param_line(k, p) for k, p in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """An ordered dict of Parameters (plain tensors are wrapped in Parameter)."""

    def __init__(self, parameters=None) -> None:
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _attr(key) -> str:
        if not isinstance(key, str):
            raise TypeError(
                "Index given to ParameterDict cannot be used as a key as it is not a string "
                f"(type is '{type(key).__name__}')."
            )
        return key

    def __getitem__(self, key):
        return getattr(self, self._attr(key))

    def __setitem__(self, key, value) -> None:
        self._keys[key] = None
        if isinstance(value, kiln.Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        setattr(self, self._attr(key), value)

    def __delitem__(self, key) -> None:
        del self._keys[key]
        delattr(self, self._attr(key))

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def keys(self):
        """The keys, in insertion order."""
        return self._keys.keys()

    def items(self):
        """(key, parameter) pairs, in insertion order."""
        return ((k, self[k]) for k in self._keys)

    def values(self):
        """The parameters, in insertion order."""
        return (self[k] for k in self._keys)

    def get(self, key, default=None):
        """self[key] if present, else default."""
        return self[key] if key in self else default  # noqa: SIM401 - this is get()

    def pop(self, key):
        """Removes and returns the parameter under ``key``."""
        v = self[key]
        del self[key]
        return v

    def clear(self) -> None:
        """Removes every parameter."""
        for k in list(self._keys):
            del self[k]

    def update(self, parameters) -> None:
        """Adds (or replaces) entries; a plain (unordered) dict is added in sorted key order,
        as torch does."""
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs = list(parameters.items())
        elif isinstance(parameters, abc.Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = _pairs(parameters, "ParameterDict", ())
        for key, value in pairs:
            self[key] = value

    def extra_repr(self) -> str:
        return "\n".join(_param_line(k, p) for k, p in self.items())

    def __call__(self, input):
        raise RuntimeError("ParameterDict should not be called.")
