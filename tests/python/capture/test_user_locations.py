"""Diagnostics name the user's line, never one inside the kiln package: graph nodes recorded in
kiln.nn code (an inlined nn.ReLU.forward) carry the line that called the module, and graph
breaks reached through kiln.nn modules (nn.Sequential) report the user's frames only."""

import inspect
import os

import pytest
from corpus_util import RecordingBackend, compiler_of, fresh_capture  # noqa: F401

import kiln
import kiln.nn as nn
from kiln._capture import logs

KILN_DIR = os.path.dirname(kiln.__file__)
HERE = os.path.basename(__file__)


def line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(lines) if text in s)


def rand(*shape):
    kiln.manual_seed(0)
    return kiln.randn(*shape)


class ResidualBlock(nn.Module):
    """A torchvision-style block: layers called through kiln.nn modules, in-place ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.fc(x)
        out = self.relu(out)
        return out + x


def test_nodes_recorded_in_kiln_modules_name_the_calling_line():
    backend = RecordingBackend()
    model = ResidualBlock().eval()
    kiln.compile(model, backend=backend)(rand(2, 4))
    (graph,) = backend.graphs
    locs = {n.name: n.meta["loc"] for n in graph.nodes if n.op == "call"}
    assert locs and all(f == __file__ for f, _ in locs.values()), locs
    lines = {n.meta["loc"][1] for n in graph.nodes if n.op == "call"}
    fwd = ResidualBlock.forward
    assert lines == {line_of(fwd, "self.fc(x)"), line_of(fwd, "self.relu(out)"),
                     line_of(fwd, "out + x")}
    text = graph.to_kir()
    assert f'loc("{HERE}":{line_of(fwd, "self.relu(out)")})' in text
    assert "activation.py" not in text and "linear.py" not in text


def test_sequential_of_kiln_layers_names_the_callers_line():
    backend = RecordingBackend()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    compiled = kiln.compile(model, backend=backend)
    call_line = inspect.currentframe().f_lineno + 1
    compiled(rand(2, 4))
    (graph,) = backend.graphs
    assert {n.meta["loc"] for n in graph.nodes if n.op == "call"} == {(__file__, call_line)}


class Printing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        print("in block")
        if y.sum() > 0:  # a data-dependent branch
            y = y * 2
        return nn.functional.relu(y)


@pytest.mark.parametrize("wrap", ["sequential", "nested"])
def test_breaks_reached_through_kiln_modules_name_user_lines(wrap, capsys):
    block = Printing()
    model = nn.Sequential(block, nn.ReLU()) if wrap == "sequential" else nn.Sequential(
        nn.Sequential(nn.Identity(), block))
    x = rand(2, 4)
    out = kiln.explain(model)(x)
    assert out.graph_break_count >= 2
    reasons = [br.reason for br in out.break_reasons]
    assert any("print()" in r for r in reasons) and any("data-dependent" in r for r in reasons)
    for br in out.break_reasons:
        assert br.user_stack, br
        for filename, _, _ in br.user_stack:
            assert filename == __file__, br
    lines = {br.lineno for br in out.break_reasons}
    assert line_of(Printing.forward, "print(") in lines
    assert line_of(Printing.forward, "if y.sum()") in lines
    assert KILN_DIR not in str(out)


def test_graph_breaks_log_names_user_lines(capsys):
    model = nn.Sequential(Printing())
    logs.configure("graph_breaks")
    try:
        kiln.compile(model, backend="eager")(rand(2, 4))
    finally:
        logs.configure()
    err = capsys.readouterr().err
    assert "graph break" in err and f"{__file__}:{line_of(Printing.forward, 'print(')}" in err
    assert KILN_DIR + os.sep not in err


class WrongWidth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x) + 1  # x has 4 features: linear raises inside kiln's Linear.forward


def test_break_raised_inside_kiln_module_code_names_the_calling_line(capsys):
    compiled = kiln.compile(WrongWidth(), backend="eager")
    records = []
    compiler_of(compiled).recorder = records
    with pytest.raises(RuntimeError) as compiled_err:
        compiled(rand(2, 4))
    with pytest.raises(RuntimeError) as eager_err:
        WrongWidth()(rand(2, 4))
    assert str(compiled_err.value) == str(eager_err.value)
    br = records[0].break_record
    assert "linear() raised" in br.reason
    line = line_of(WrongWidth.forward, "self.fc(x)")
    assert [(f, n) for f, n, _ in br.user_stack] == [(__file__, line)]
