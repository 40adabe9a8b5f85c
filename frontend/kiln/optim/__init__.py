"""kiln.optim: optimizers and learning-rate schedules with torch.optim's names and semantics.

``Optimizer`` subclasses update parameters in place from their ``.grad`` under ``no_grad``;
their state dicts use torch's layout, and ``lr_scheduler`` holds the schedules.
"""

from kiln.optim import lr_scheduler  # noqa: F401
from kiln.optim.adadelta import Adadelta
from kiln.optim.adagrad import Adagrad
from kiln.optim.adam import Adam, AdamW
from kiln.optim.adamax import Adamax
from kiln.optim.asgd import ASGD
from kiln.optim.nadam import NAdam
from kiln.optim.optimizer import Optimizer
from kiln.optim.radam import RAdam
from kiln.optim.rmsprop import RMSprop
from kiln.optim.rprop import Rprop
from kiln.optim.sgd import SGD

__all__ = [
    "ASGD",
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "NAdam",
    "Optimizer",
    "RAdam",
    "RMSprop",
    "Rprop",
    "lr_scheduler",
]
