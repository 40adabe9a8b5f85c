"""kiln.optim: optimizers and learning-rate schedules with torch.optim's names and semantics.

``Optimizer`` subclasses update parameters in place from their ``.grad`` under ``no_grad``;
their state dicts use torch's layout, and ``lr_scheduler`` holds the schedules.
"""

from kiln.optim import lr_scheduler  # noqa: F401
from kiln.optim.adagrad import Adagrad
from kiln.optim.adam import Adam, AdamW
from kiln.optim.optimizer import Optimizer
from kiln.optim.rmsprop import RMSprop
from kiln.optim.sgd import SGD

__all__ = ["SGD", "Adagrad", "Adam", "AdamW", "Optimizer", "RMSprop", "lr_scheduler"]
