"""_ops_reduce: Python-level parts of reductions, scans, sorting and softmax (see kiln/_ops.py).

``kiln.return_types`` holds the named tuples ops such as ``max(dim)`` and ``sort`` return, so
``x.max(1).values`` and ``values, indices = x.max(1)`` both work as in torch.
"""

import collections as _collections
import sys as _sys
import types as _types

return_types = _types.ModuleType("kiln.return_types", "Named tuples returned by kiln ops.")
for _name, _fields in [
    ("max", ("values", "indices")),
    ("min", ("values", "indices")),
    ("sort", ("values", "indices")),
    ("topk", ("values", "indices")),
    ("kthvalue", ("values", "indices")),
    ("median", ("values", "indices")),
    ("nanmedian", ("values", "indices")),
    ("mode", ("values", "indices")),
    ("cummax", ("values", "indices")),
    ("cummin", ("values", "indices")),
    ("aminmax", ("min", "max")),
]:
    _cls = _collections.namedtuple(_name, _fields)
    _cls.__module__ = "kiln.return_types"
    _cls.__qualname__ = _name
    setattr(return_types, _name, _cls)
_sys.modules["kiln.return_types"] = return_types

__all__ = ["return_types"]
