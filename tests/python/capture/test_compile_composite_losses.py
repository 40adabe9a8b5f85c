"""The losses written in kiln ops (nn/_functional_composite*.py) compile with no eager node:
their legacy size_average/reduce handling was an opaque call whose string result broke the
graph."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln
import kiln.nn.functional as F

LOSSES = {
    "margin_ranking": lambda x, y, t: F.margin_ranking_loss(x, y, t, margin=0.1),
    "soft_margin": lambda x, y, t: F.soft_margin_loss(x, t, reduction="sum"),
    "hinge_embedding": lambda x, y, t: F.hinge_embedding_loss(x, t),
    "cosine_embedding": lambda x, y, t: F.cosine_embedding_loss(x.view(4, 2), y.view(4, 2),
                                                                t[:4]),
    "multilabel_soft_margin": lambda x, y, t: F.multilabel_soft_margin_loss(
        x.view(2, 4), (t.view(2, 4) > 0).float()),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_composite_loss_compiles_whole(name):
    target = kiln.tensor([1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0])
    backend = run_compiled(LOSSES[name], rand(8), rand(8, seed=1), target, tol=(1e-5, 1e-6))
    assert [len(r.parts) for r in backend.reports] == [1]
    assert all(r.eager_nodes == 0 for r in backend.reports)
