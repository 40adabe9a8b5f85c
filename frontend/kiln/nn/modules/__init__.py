"""kiln.nn's layer classes, one concept per file (as in torch/nn/modules)."""

from kiln.nn.modules.activation import *  # noqa: F403
from kiln.nn.modules.activation_extra import *  # noqa: F403
from kiln.nn.modules.attention import *  # noqa: F403
from kiln.nn.modules.batchnorm import *  # noqa: F403
from kiln.nn.modules.composite import *  # noqa: F403
from kiln.nn.modules.container import *  # noqa: F403
from kiln.nn.modules.conv import *  # noqa: F403
from kiln.nn.modules.conv_transpose import *  # noqa: F403
from kiln.nn.modules.dropout import *  # noqa: F403
from kiln.nn.modules.flatten import *  # noqa: F403
from kiln.nn.modules.fold import *  # noqa: F403
from kiln.nn.modules.lazy import *  # noqa: F403
from kiln.nn.modules.linear import *  # noqa: F403
from kiln.nn.modules.loss import *  # noqa: F403
from kiln.nn.modules.loss_extra import *  # noqa: F403
from kiln.nn.modules.module import *  # noqa: F403
from kiln.nn.modules.normalization import *  # noqa: F403
from kiln.nn.modules.normalization_extra import *  # noqa: F403
from kiln.nn.modules.pooling import *  # noqa: F403
from kiln.nn.modules.pooling_extra import *  # noqa: F403
from kiln.nn.modules.rnn import *  # noqa: F403
from kiln.nn.modules.sparse import *  # noqa: F403
from kiln.nn.modules.sparse_extra import *  # noqa: F403
from kiln.nn.modules.transformer import *  # noqa: F403
from kiln.nn.modules.upsampling import *  # noqa: F403

# The argument helpers (torch.nn.modules.utils) stay importable by that name but are not an
# attribute here: kiln.nn's star import of this package would otherwise shadow kiln.nn.utils.
del utils  # noqa: F821 - bound by the submodule imports above
