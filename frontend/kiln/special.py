"""kiln.special: torch.special's functions under their torch.special names.

Every entry is a kiln op or a composite of kiln ops defined elsewhere (kiln/_ops_composite_*.py),
bound here without a wrapper, so kiln.compile sees the same callee as for the top-level name.
"""

import kiln
from kiln._ops_composite_math import digamma, erfinv, lgamma, logit, sinc, xlogy
from kiln._ops_composite_stats import (
    entr,
    i0,
    i0e,
    i1,
    i1e,
    log_ndtr,
    ndtr,
    ndtri,
    polygamma,
    xlog1py,
    zeta,
)
from kiln._ops_composite_stats import mvlgamma as multigammaln

__all__ = ["digamma", "entr", "erf", "erfc", "erfinv", "exp2", "expit", "expm1", "gammaln", "i0",
           "i0e", "i1", "i1e", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp",
           "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round", "sinc", "softmax",
           "xlog1py", "xlogy", "zeta"]  # fmt: skip

erf = kiln.erf
erfc = kiln.erfc
exp2 = kiln.exp2
expm1 = kiln.expm1
log1p = kiln.log1p
expit = kiln.sigmoid
logsumexp = kiln.logsumexp
log_softmax = kiln.log_softmax
softmax = kiln.softmax
gammaln = lgamma
psi = digamma
round = kiln.round  # noqa: A001 - torch.special's name
