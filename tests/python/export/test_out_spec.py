"""out_spec texts: parsing is a whitelist (no evaluation), packing rebuilds the structure."""

import pytest

from kiln._export.out_spec import Output, OutSpecError, output_indices, pack, parse_spec


@pytest.mark.parametrize(
    "text, want",
    [
        ("%0", Output(0)),
        ("(%0, None)", (Output(0), None)),
        ("(%1,)", (Output(1),)),
        ("{'logits': %0, 'loss': None}", {"logits": Output(0), "loss": None}),
        ("[%0, (%1, 'a%2'), -3, 2.5, True, {}]",
         [Output(0), (Output(1), "a%2"), -3, 2.5, True, {}]),
        ('{"k%0": [%2]}', {"k%0": [Output(2)]}),
    ],
)
def test_parse(text, want):
    assert parse_spec(text) == want


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "open('x')",
        "%0 + %1",
        "{%0: 1}",
        "{1: %0}",
        "x",
        "lambda: 0",
        "[i for i in ()]",
        "(%0",
        "b'bytes'",
        "{'a', 'b'}",
    ],
)
def test_rejects_anything_but_literals(text):
    with pytest.raises(OutSpecError):
        parse_spec(text)


def test_pack_and_indices():
    spec = parse_spec("{'a': (%1, None), 'b': [%0]}")
    assert output_indices(spec) == [1, 0]
    assert pack(spec, ("x", "y")) == {"a": ("y", None), "b": ["x"]}
