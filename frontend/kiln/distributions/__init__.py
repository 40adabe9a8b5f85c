"""Probability distributions with torch.distributions' API and semantics.

``import kiln.distributions as D`` mirrors ``torch.distributions``: parameters are
kiln tensors, ``rsample`` is differentiable where torch's is (Gamma, Beta and
Dirichlet use torch's implicit reparameterization gradients), and
``kl_divergence``/``register_kl`` dispatch on the pair of types.
"""

from . import constraints, transforms
from .bernoulli import Bernoulli
from .beta import Beta
from .binomial import Binomial
from .categorical import Categorical
from .cauchy import Cauchy
from .chi2 import Chi2
from .constraints import Constraint
from .dirichlet import Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .exponential import Exponential
from .gamma import Gamma
from .gumbel import Gumbel
from .independent import Independent
from .kl import kl_divergence, register_kl
from .laplace import Laplace
from .log_normal import LogNormal
from .mixture_same_family import MixtureSameFamily
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from .poisson import Poisson
from .studentT import StudentT
from .transformed_distribution import TransformedDistribution
from .transforms import (
    AbsTransform,
    AffineTransform,
    ComposeTransform,
    ExpTransform,
    PowerTransform,
    SigmoidTransform,
    SoftplusTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from .uniform import Uniform

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Binomial",
    "Categorical",
    "Cauchy",
    "Chi2",
    "ComposeTransform",
    "Constraint",
    "Dirichlet",
    "Distribution",
    "ExpTransform",
    "Exponential",
    "ExponentialFamily",
    "Gamma",
    "Gumbel",
    "Independent",
    "Laplace",
    "LogNormal",
    "MixtureSameFamily",
    "MultivariateNormal",
    "Normal",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Poisson",
    "PowerTransform",
    "SigmoidTransform",
    "SoftplusTransform",
    "StudentT",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "constraints",
    "identity_transform",
    "kl_divergence",
    "register_kl",
    "transforms",
]
