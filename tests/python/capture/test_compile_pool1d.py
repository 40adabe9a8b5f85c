"""1-d pools (text and audio CNNs) compile as the 2-d pools of a height-one input, with no
eager node, equal to eager over windows, strides, padding, dilation and ceil_mode."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln
import kiln.nn.functional as F

POOL = kiln.nn.MaxPool1d(2)
CASES = {
    "max": lambda x: F.max_pool1d(x, 3),
    "max_strided_padded": lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True),
    "max_dilated": lambda x: kiln.max_pool1d(x, 2, 1, 0, 2),
    "avg": lambda x: F.avg_pool1d(x, 2),
    "avg_padded_no_count": lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False),
    "adaptive_avg": lambda x: F.adaptive_avg_pool1d(x, 4),
    "module": lambda x: POOL(x.relu()) + 1,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pool1d_compiles(name):
    backend = run_compiled(CASES[name], rand(2, 3, 11))
    assert [len(r.parts) for r in backend.reports] == [1]
    assert all(r.eager_nodes == 0 for r in backend.reports)
