"""kiln.nn.functional: the functional forms of kiln.nn's modules, torch's names and signatures."""

from kiln.nn._functional_activation import *  # noqa: F401,F403
from kiln.nn._functional_composite import *  # noqa: F401,F403
from kiln.nn._functional_composite_extra import *  # noqa: F401,F403
from kiln.nn._functional_conv import *  # noqa: F401,F403
from kiln.nn._functional_ctc import *  # noqa: F401,F403
from kiln.nn._functional_linalg import *  # noqa: F401,F403
from kiln.nn._functional_loss import *  # noqa: F401,F403
from kiln.nn._functional_norm import *  # noqa: F401,F403
from kiln.nn._functional_random import *  # noqa: F401,F403
from kiln.nn._functional_reduce import *  # noqa: F401,F403
from kiln.nn._functional_shape import *  # noqa: F401,F403
