"""Compiled parts run their intermediates out of a pooled arena laid out by the memory plan
(codegen/README.md, "Run-time memory plan"): the GPT model compiled equals eager across repeated
calls, sequence lengths that grow and shrink (the arena grows and is reused), and threads
sharing one compiled model; returned tensors are never arena memory."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend


def _gpt(use_mha: bool):
    from models import gpt

    kiln.manual_seed(0)
    return gpt.build(kiln, nn, F)(block_size=64, d_model=64, n_layer=2, use_mha=use_mha).eval()


def _close(got, want):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("use_mha", [False, True])
def test_gpt_compiled_equals_eager_as_lengths_change(use_mha):
    model = _gpt(use_mha)
    backend = CpuBackend()
    compiled = kiln.compile(model, backend=backend, dynamic=True)
    with kiln.no_grad():
        kept = []
        for t in (8, 40, 64, 8, 40):  # grow, then smaller lengths in the grown arena
            idx = kiln.randint(0, 50, (3, t))
            logits, loss = compiled(idx)
            assert loss is None
            _close(logits, model(idx)[0])
            kept.append((logits.clone(), logits))
        # Results handed back earlier were not overwritten by later calls.
        for copy, logits in kept:
            np.testing.assert_array_equal(logits.numpy(), copy.numpy())
    assert backend.reports and all(r.compiled_nodes > 0 for r in backend.reports)


def test_gpt_compiled_from_threads():
    model = _gpt(False)
    compiled = kiln.compile(model, backend=CpuBackend(), dynamic=True)
    inputs = [kiln.randint(0, 50, (2, t)) for t in (5, 33, 64, 17)]
    with kiln.no_grad():
        wants = [model(idx)[0] for idx in inputs]
        compiled(inputs[0])  # compile once before the threads
        errors = []

        def work(k):
            try:
                with kiln.no_grad():
                    for n in range(6):
                        which = (k + n) % len(inputs)
                        _close(compiled(inputs[which])[0], wants[which])
            except Exception as e:  # reported below: pytest does not see thread failures
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert errors == []
