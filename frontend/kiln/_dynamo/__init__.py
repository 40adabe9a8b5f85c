"""kiln._dynamo: the names scripts reach through torch._dynamo (its config, reset, marks)."""

from __future__ import annotations

import types

from kiln._capture.context import mark_dynamic, mark_static
from kiln.compiler import allow_in_graph, disable, is_compiling, reset

# torch._dynamo.config's switches that scripts set: cache_size_limit is the recompile limit of
# kiln.compile (its `recompile_limit` option overrides it); the others are accepted and
# recorded (kiln always falls back to eager code on a break, and captures scalar outputs as
# run-time numbers).
config = types.SimpleNamespace(cache_size_limit=8, accumulated_cache_size_limit=256,
                               suppress_errors=False, verbose=False,
                               capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False,
                               automatic_dynamic_shapes=True, optimize_ddp=True)  # fmt: skip


def explain(fn, *args, **kwargs):
    """kiln.explain."""
    from kiln import explain as kiln_explain

    return kiln_explain(fn, *args, **kwargs)


__all__ = ["allow_in_graph", "config", "disable", "explain", "is_compiling", "mark_dynamic",
           "mark_static", "reset"]  # fmt: skip
