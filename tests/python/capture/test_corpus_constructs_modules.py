"""Capture corpus, constructs captured whole (3/3): kiln.nn.Module programs: submodules,
Sequential, ModuleList, ModuleDict, parameters and buffers, dropout in eval mode, super(), a
ResNet block, the test conv net, a GPT block and whole GPTs.

See test_corpus_constructs.py for what every program is checked for.
"""

import pytest
from corpus_util import Corpus, fresh_capture  # noqa: F401 - fresh_capture is autouse

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

corpus = Corpus()
module_case = corpus.module_case


def r(*shape):
    """A random float32 tensor (Corpus.run seeds the generator first)."""
    return kiln.randn(*shape)


# ---------------------------------------------------------------------------------------------
# nn.Module programs
# ---------------------------------------------------------------------------------------------
class MLP(nn.Module):
    """Linear -> GELU -> Linear, with a Python-attribute scale."""

    def __init__(self, d=8, hidden=16) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)
        self.scale = 0.5

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def b8():
    return (r(2, 8),)


@module_case(b8, ops=4)
def module_with_submodules():
    return MLP()


@module_case(b8, ops=4)
def sequential_module():
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4), nn.Tanh()).eval()


class Stack(nn.Module):
    """ModuleList iteration, indexing, slicing, len and enumerate."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers[:2]:
            x = layer(x).relu()
        for i, layer in enumerate(self.layers):
            if i == len(self.layers) - 1:
                x = layer(x)
        return self.layers[-1](x) + self.layers[0].bias


@module_case(b8, ops=7)
def module_list():
    return Stack()


class Heads(nn.Module):
    """ModuleDict iteration (keys, items, values) and indexing by a constant key."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})

    def forward(self, x):
        out = {name: head(x) for name, head in self.heads.items()}
        n = sum(h.out_features for h in self.heads.values())
        return out, self.heads["a"](x) * n, list(self.heads.keys()), "b" in self.heads


@module_case(b8, ops=4)
def module_dict():
    return Heads()


class WithBuffer(nn.Module):
    """Parameters used directly, a buffer, a property and a helper method."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(kiln.randn(4, 8))
        self.bias = nn.Parameter(kiln.zeros(4))
        self.register_buffer("running", kiln.ones(4))

    @property
    def out_dim(self):
        return self.weight.shape[0]

    def _project(self, x):
        return F.linear(x, self.weight, self.bias)

    def forward(self, x):
        return self._project(x) * self.running + self.out_dim


@module_case(b8, ops=3)
def module_parameters_buffers_property():
    return WithBuffer()


class Dropper(nn.Module):
    """Dropout (evaluated in eval mode: the identity) and a branch on self.training."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        x = self.drop(self.lin(x))
        return F.dropout(x, p=0.3, training=self.training) + (1 if self.training else 2)


@module_case(b8, ops=4)
def dropout_in_eval_mode():
    return Dropper().eval()


class Base(nn.Module):
    """A base module whose forward a subclass extends."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x)


class Derived(Base):
    """Calls the base forward through super()."""

    def forward(self, x):
        return super().forward(x).sigmoid()


@module_case(b8, ops=2)
def module_super_forward():
    return Derived()


class ResBlock(nn.Module):
    """A ResNet basic block with a strided 1x1 projection shortcut (BatchNorm in eval)."""

    def __init__(self, cin=4, cout=8, stride=2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


@module_case(lambda: (r(2, 4, 8, 8),), tol=1e-4)
def resnet_block():
    return ResBlock().eval()


@module_case(lambda: (r(2, 3, 8, 8),), tol=1e-4)
def convnet_model():
    from models import convnet

    return convnet.build(kiln, nn, F)().eval()


def _gpt_inputs():
    return (kiln.randint(0, 50, (2, 8)),)


@module_case(_gpt_inputs, tol=1e-4)
def gpt_block():
    from models import gpt

    model = gpt.build(kiln, nn, F)(n_layer=1).eval()
    block = model.blocks[0]
    emb = model.tok_emb

    class Wrapped(nn.Module):
        """One GPT block on embedded tokens."""

        def __init__(self) -> None:
            super().__init__()
            self.emb, self.block = emb, block

        def forward(self, idx):
            return self.block(self.emb(idx))

    return Wrapped()


@module_case(lambda: (kiln.randint(0, 50, (2, 8)), kiln.randint(0, 50, (2, 8))), tol=1e-4)
def gpt_model_with_loss():
    from models import gpt

    return gpt.build(kiln, nn, F)().eval()


@module_case(lambda: (kiln.randint(0, 64, (2, 16)),), tol=1e-4)
def demo_gpt():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[3] / "tools" / "demo.py"
    spec = importlib.util.spec_from_file_location("kiln_demo", path)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo.build_gpt(kiln, nn, F, vocab=64, d=32, heads=4, layers=2, ctx=16).eval()


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph", "fullgraph"])
@pytest.mark.parametrize("name", corpus.names())
def test_construct(name, fullgraph):
    corpus.run(name, fullgraph)
