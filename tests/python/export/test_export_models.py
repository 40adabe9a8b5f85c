"""kiln.export of the GPT-style and ResNet-style models with a dynamic batch: export, save,
load, and module() give eager's results for two batch sizes; weights are named and tied once."""

import pytest
from models import convnet, gpt

import kiln
import kiln._capture.convert_frame
import kiln.nn as knn
import kiln.nn.functional as kF
from kiln._export.program import InputSpec

ATOL = 1e-5


def build(builder, **config):
    kiln.manual_seed(0)
    return builder(kiln, knn, kF)(**config).eval()


def assert_close(got, want, atol=ATOL):
    assert isinstance(got, kiln.Tensor)
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
    assert float((got - want).abs().max()) <= atol


@pytest.fixture(scope="module", params=[False, True],
                ids=["attn", "mha"])
def gpt_program(request, tmp_path_factory):
    model = build(gpt.build, dropout=0.0, use_mha=request.param)
    kiln.manual_seed(1)
    idx = kiln.randint(0, 50, (3, 8))
    batch = kiln.Dim("batch", min=2, max=64)
    program = kiln.export(model, (idx,), dynamic_shapes={"idx": {0: batch}})
    folder = tmp_path_factory.mktemp("gpt")
    program.save(folder / "gpt")
    return model, program, kiln.load_exported(folder / "gpt.kir"), folder


def test_gpt_program_interface(gpt_program):
    model, program, loaded, folder = gpt_program
    assert program.input_specs == [InputSpec("idx", kiln.int64, ("batch", 8), {"batch": (2, 64)})]
    assert program.range_constraints == {"batch": (2, 64)}
    assert [(s.dtype, s.shape) for s in program.output_specs] == [(kiln.float32, ("batch", 8, 50))]
    assert program.out_spec == "(%0, None)"
    assert "%idx: i64[batch, 8]" in program.graph_text
    assert 'sym_constrain_range() {max = 64, min = 2, symbol = "batch"}' in program.graph_text
    # Weight tying: head.weight is tok_emb.weight, stored and read once under its first name.
    assert "head.weight" not in program.weights
    assert program.graph_text.count('weight() {name = "tok_emb.weight"}') == 1
    assert set(program.weights) == {k for k, _ in model.named_parameters()}
    for key, t in model.named_parameters():
        assert bool((program.weights[key] == t).all())
    assert loaded.graph_text == program.graph_text
    assert loaded.input_specs == program.input_specs
    assert loaded.output_specs == program.output_specs
    assert sorted((folder).iterdir()) == [folder / "gpt.kir", folder / "gpt.safetensors"]
    assert "ExportedProgram(GPT(idx: int64[batch, 8]) -> float32[batch, 8, 50]" in repr(program)


@pytest.mark.parametrize("batch", [2, 5])
def test_gpt_matches_eager(gpt_program, batch):
    model, program, loaded, _ = gpt_program
    kiln.manual_seed(batch)
    idx = kiln.randint(0, 50, (batch, 8))
    want, loss = model(idx)
    assert loss is None
    for p in (program, loaded):
        logits, loss = p.module()(idx)
        assert loss is None
        assert_close(logits, want)


def test_gpt_rejects_inputs_outside_the_specs(gpt_program):
    _, program, loaded, _ = gpt_program
    run = loaded.module()
    with pytest.raises(ValueError, match=r"input 'idx' dim 0 \(batch\) is 65, outside the range "
                                         r"\[2, 64\]"):
        run(kiln.zeros(65, 8, dtype=kiln.int64))
    with pytest.raises(ValueError, match=r"input 'idx' dim 0 \(batch\) is 1, outside"):
        run(kiln.zeros(1, 8, dtype=kiln.int64))
    with pytest.raises(TypeError, match=r"input 'idx' has dtype float32, expected int64"):
        run(kiln.zeros(2, 8))
    with pytest.raises(ValueError, match=r"input 'idx' has rank 1, expected 2 \(expected "
                                         r"int64\[batch, 8\], got int64\[8\]\)"):
        run(kiln.zeros(8, dtype=kiln.int64))
    with pytest.raises(ValueError, match=r"input 'idx' has size 9 at dim 1, expected 8"):
        run(kiln.zeros(2, 9, dtype=kiln.int64))
    with pytest.raises(TypeError, match=r"input 'idx' must be a tensor"):
        run([[1, 2]])
    with pytest.raises(TypeError, match=r"takes 1 arguments \(idx\), got 2"):
        run(kiln.zeros(2, 8, dtype=kiln.int64), None)


def test_convnet_matches_eager(tmp_path):
    model = build(convnet.build)
    kiln.manual_seed(3)
    x = kiln.randn(3, 3, 12, 12)
    program = kiln.export(model, (x,), dynamic_shapes=({0: kiln.Dim("n", max=32)},))
    assert program.input_specs[0].shape == ("n", 3, 12, 12)
    assert "features.1.running_mean" in program.weights
    program.save(tmp_path / "convnet.kir")
    loaded = kiln.load_exported(tmp_path / "convnet")
    for n in (2, 7):
        x = kiln.randn(n, 3, 12, 12)
        want = model(x)
        for p in (program, loaded):
            assert_close(p.module()(x), want)
