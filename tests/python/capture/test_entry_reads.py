"""The entry a cache hit runs reads each shared access chain once: an optimizer step's
``opt.param_groups[0]['params']`` is looked up once for all its parameters and gradients, and
each parameter once for itself and its ``.grad``; results stay eager's."""

from __future__ import annotations

import itertools

from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
from kiln._capture.backend_compiled import CpuBackend
from kiln._capture.codegen import hoist_shared_prefixes


def hoisted(exprs):
    names = (f"_s{k}" for k in itertools.count())
    return hoist_shared_prefixes(exprs, lambda: next(names))


def test_chains_read_by_several_inputs_are_read_once():
    base = "_func.__globals__['opt'].param_groups[0]['params']"
    exprs = [f"{base}[{i}]{tail}" for i in range(3) for tail in (".grad", "")]
    lines, out = hoisted([*exprs, None, "a0", "a1.weight"])
    assert lines == [f"    _s0 = {base}", "    _s1 = _s0[0]", "    _s2 = _s0[1]",
                     "    _s3 = _s0[2]"]  # fmt: skip
    assert out == ["_s1.grad", "_s1", "_s2.grad", "_s2", "_s3.grad", "_s3", None, "a0",
                   "a1.weight"]  # fmt: skip


def test_keys_with_dots_and_brackets_and_calls_are_left_whole():
    # A '.' or '[' inside a string key is not an access; a chain with a call is never hoisted
    # (evaluated once instead of twice, a call could do something different).
    lines, out = hoisted(["a0['x.y[']", "a0['x.y['].z", "f(a0).b", "f(a0).c"])
    assert lines == ["    _s0 = a0['x.y[']"]
    assert out == ["_s0", "_s0.z", "f(a0).b", "f(a0).c"]


def test_a_compiled_optimizer_step_reads_its_parameter_list_once():
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    twin = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    twin.load_state_dict(model.state_dict())
    opts = [kiln.optim.AdamW(m.parameters(), lr=0.1) for m in (model, twin)]
    x = kiln.randn(3, 4)
    for m in (model, twin):
        m(x).sum().backward()

    global _entry_reads_opt
    _entry_reads_opt = opts[0]
    backend = CpuBackend(fallback=False)  # strict: a decline fails the test
    step = kiln.compile(_step, backend=backend)
    for _ in range(3):
        step()
        opts[1].step()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert kiln.allclose(p, q, rtol=2e-5, atol=1e-5)  # compiled rounding: 1 ulp here
    (report,) = backend.reports  # one capture: the update compiled, nothing eager
    assert len(report.parts) == 1 and report.eager_nodes == 0 and report.eager_calls == 0
    (entry,) = [e for e in _entries() if "_entry_reads_opt" in e.kiln_source]
    source = entry.kiln_source
    assert source.count("['params']") == 1, source
    assert source.count(".grad") == 4, source  # one per parameter, through its local


_entry_reads_opt = None


def _step():
    _entry_reads_opt.step()


def _entries():
    import gc

    return [o for o in gc.get_objects() if callable(o) and hasattr(o, "kiln_source")]
