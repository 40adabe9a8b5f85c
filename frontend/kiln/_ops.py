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

from kiln._factory import *  # noqa: E402,F401,F403
from kiln._grad_mode import *  # noqa: E402,F401,F403
from kiln._ops_elementwise import *  # noqa: E402,F401,F403
from kiln._ops_linalg import *  # noqa: E402,F401,F403
from kiln._ops_nn import *  # noqa: E402,F401,F403
from kiln._ops_reduce import *  # noqa: E402,F401,F403
from kiln._ops_shape import *  # noqa: E402,F401,F403
