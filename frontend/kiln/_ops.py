"""kiln.<op> functions.

Every public function of the C++ extension is an op and is re-exported here; ops whose Python
part is argument parsing live in the `_ops_<area>.py` files, one per area of the op set.
"""

import types as _types

from kiln import _C

for _name in dir(_C):
    _obj = getattr(_C, _name)
    if not _name.startswith("_") and isinstance(_obj, _types.BuiltinFunctionType):
        globals()[_name] = _obj

from kiln._dtype_info import *  # noqa: E402,F401,F403
from kiln._factory import *  # noqa: E402,F401,F403
from kiln._grad_mode import *  # noqa: E402,F401,F403
from kiln._ops_composite import *  # noqa: E402,F401,F403
from kiln._ops_composite_index import *  # noqa: E402,F401,F403
from kiln._ops_composite_linalg import *  # noqa: E402,F401,F403
from kiln._ops_composite_math import *  # noqa: E402,F401,F403
from kiln._ops_composite_stats import *  # noqa: E402,F401,F403
from kiln._ops_composite_torch_level import *  # noqa: E402,F401,F403
from kiln._ops_elementwise import *  # noqa: E402,F401,F403
from kiln._ops_linalg import *  # noqa: E402,F401,F403
from kiln._ops_nn import *  # noqa: E402,F401,F403
from kiln._ops_reduce import *  # noqa: E402,F401,F403
from kiln._ops_shape import *  # noqa: E402,F401,F403
from kiln._tensor_compat import *  # noqa: E402,F401,F403


def _assert(condition, message):
    """torch._assert: raises AssertionError(message) when `condition` is false. `condition` is a
    Python value or a one-element tensor (a tensor of more elements raises, as bool() does).

    An explicit raise rather than an `assert` statement, so `python -O` keeps the check. Under
    kiln.compile a Python condition is decided at capture time and a tensor one becomes a graph
    node that runs with the graph (see KilnCallMixin.kiln_assert)."""
    if not condition:
        raise AssertionError(message)
