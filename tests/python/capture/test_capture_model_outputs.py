"""HF-style ModelOutput: a dataclass deriving from OrderedDict whose own __setattr__ /
__setitem__ keep its items and attributes in step. Created inside compiled code it is captured
whole (no graph break): the dataclass __init__ and __post_init__ inline, `out.logits`,
`out["logits"]`, `out[0]`, `out.to_tuple()` and iteration read it, and the object returned is
rebuilt with the same items and attributes as eager's."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, fields

import pytest
from corpus_util import assert_same, fresh_capture, run_case  # noqa: F401

import kiln


class ModelOutput(OrderedDict):
    def __post_init__(self):
        for field in fields(self):
            v = getattr(self, field.name)
            if v is not None:
                self[field.name] = v

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclass
class CausalLMOutput(ModelOutput):
    loss: kiln.Tensor = None
    logits: kiln.Tensor = None
    hidden_states: tuple = None


@dataclass
class PlainOutput(OrderedDict):  # no hooks of its own
    last_hidden_state: kiln.Tensor = None
    pooler_output: kiln.Tensor = None


def forward(x, labels=None):
    logits = x.tanh() * 2
    loss = None if labels is None else ((logits - labels) ** 2).mean()
    return CausalLMOutput(loss=loss, logits=logits, hidden_states=(x, logits))


def test_a_model_output_is_captured_whole_and_rebuilt_as_eager():
    x = kiln.randn(2, 3)
    info = run_case(forward, x, expect_graphs=1, expect_breaks=0)
    got = info.compiled(x)
    want = forward(x)
    assert type(got) is CausalLMOutput and list(got.keys()) == list(want.keys())
    assert got.loss is None and "loss" not in got
    assert_same(got.logits, want.logits)
    assert got["logits"] is got.logits and got[0] is got.logits  # one tensor, one object


def test_reading_a_model_output_inside_compiled_code():
    def use(x, labels):
        out = forward(x, labels)
        a, b = out.to_tuple()[:2]
        keys = [k for k in out]
        return out["loss"] + out[1].sum() + a * 0 + b.mean(), len(out), keys, "loss" in out

    info = run_case(use, kiln.randn(2, 3), kiln.randn(2, 3), expect_graphs=1, expect_breaks=0)
    assert info.op_counts[0] > 0


def test_a_plain_dict_dataclass_output():
    def fn(x):
        out = PlainOutput(last_hidden_state=x * 2, pooler_output=x.tanh())
        out["extra"] = x + 1
        return out

    x = kiln.randn(3)
    run_case(fn, x, expect_graphs=1, expect_breaks=0)
    got = kiln.compile(fn)(x)
    assert type(got) is PlainOutput and list(got) == ["extra"]  # dataclass fields are attributes
    assert_same(got.pooler_output, x.tanh())


@pytest.mark.parametrize("bad", ["missing_key"])
def test_a_missing_key_raises_as_eager(bad):
    def fn(x):
        return forward(x)["loss"]  # loss is None: not an item, KeyError in eager

    with pytest.raises(KeyError):
        fn(kiln.randn(2))
    with pytest.raises(KeyError):
        kiln.compile(fn)(kiln.randn(2))
