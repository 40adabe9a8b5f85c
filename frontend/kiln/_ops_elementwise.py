"""_ops_elementwise: Python-level elementwise ops (see kiln/_ops.py).

Every elementwise op (arithmetic, comparisons, logical/bitwise, unary math, clamp/where/lerp and
the activations) is bound in C++ (frontend/csrc/bind_elementwise*.cc, bind_activation.cc) with
torch's argument names and keywords, so nothing needs Python glue here yet.
"""

__all__ = []
