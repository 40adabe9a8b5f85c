"""kiln.nn: modules with PyTorch's names and interfaces.

``import kiln.nn as nn`` gives Module, Parameter, the layers (Linear, Conv2d, LayerNorm,
MultiheadAttention, ...), containers, losses, and the ``functional``, ``init`` and ``utils``
submodules.
"""

from kiln.nn import functional, init, parallel, utils  # noqa: F401
from kiln.nn.modules import *  # noqa: F403
from kiln.nn.parameter import Buffer, Parameter  # noqa: F401
