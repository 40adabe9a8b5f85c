"""_ops_elementwise: Python-level elementwise ops (see kiln/_ops.py).

Every elementwise op (arithmetic, comparisons, logical/bitwise, unary math, clamp/where/lerp and
the activations) is bound in C++ from its op-table row (ir/ops.def, frontend/csrc/
bind_op_table.cc) with torch's argument names, keywords and errors, so nothing needs Python glue
here.
"""

__all__ = []
