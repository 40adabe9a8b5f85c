"""addcmul for the optimizers, rounded the way torch's CPU kernel rounds it.

kiln has no ``addcmul``; the optimizers need torch's ``self + value * t1 * t2``. torch's CPU
kernel evaluates it as one fused multiply-add of ``(value * t1)`` and ``t2`` onto ``self``, so
composing it from a multiply and an add rounds twice and drifts from torch by a few ulps per
step (Adagrad's running sum of squares is the worst case). For float32 the single rounding is
recovered by doing the fused step in float64, where the product of two float32 values is
exact; other dtypes use the plain composition (float64 results then differ from torch's by at
most an ulp per step). ``addcdiv`` needs no helper: ``self + (value * t1) / t2`` composed from
kiln ops already rounds as torch's kernel does.
"""

from __future__ import annotations

import kiln

__all__ = ["addcmul", "addcmul_"]


def addcmul(self, t1, t2, value=1.0):
    """A new tensor ``self + value * t1 * t2`` (torch.addcmul)."""
    scaled = t1 * value
    if self.dtype == kiln.float32:
        return self.double().add_(scaled.double() * t2.double()).float()
    return self + scaled * t2


def addcmul_(self, t1, t2, value=1.0):
    """``self += value * t1 * t2`` in place (Tensor.addcmul_); returns ``self``."""
    if self.dtype == kiln.float32:
        return self.copy_(addcmul(self, t1, t2, value))
    return self.add_(t1 * value * t2)
