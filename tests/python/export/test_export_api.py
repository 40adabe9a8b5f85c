"""kiln.export on small functions: the program text, specs, out_spec, module(), and every error
export raises (graph breaks, Dim misuse, specialized or narrowed dims, bad arguments)."""

import inspect
import os
import stat

import pytest

import kiln
from kiln._capture.convert_frame import CaptureError
from kiln._export.capture import ExportError

B = kiln.Dim("batch", max=64)
GLOBAL_SCALE = kiln.tensor([1.0, 2.0, 3.0])


def line_of(fn, text: str) -> int:
    """The line number of the first line of `fn` that contains `text`."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def affine(x, w):
    return x @ w + 1.0


def test_program_text_and_specs():
    x, w = kiln.randn(4, 3), kiln.randn(3, 5)
    p = kiln.export(affine, (x, w), dynamic_shapes={"x": {0: B}})
    assert p.graph_text.startswith(
        "graph @affine(%x: f32[batch, 3], %w: f32[3, 5]) {\n"
        '  sym_constrain_range() {max = 64, min = 2, symbol = "batch"}\n')
    assert p.graph_text.endswith(' {out_spec = "%0"}\n}\n')
    assert [(s.name, s.dtype, s.shape, s.ranges) for s in p.input_specs] == [
        ("x", kiln.float32, ("batch", 3), {"batch": (2, 64)}),
        ("w", kiln.float32, (3, 5), {}),
    ]
    assert [(s.dtype, s.shape) for s in p.output_specs] == [(kiln.float32, ("batch", 5))]
    assert p.weights == {}
    assert repr(p) == ("ExportedProgram(affine(x: float32[batch, 3], w: float32[3, 5]) -> "
                       "float32[batch, 5]; out_spec %0; 0 weights, 0 elements; "
                       "batch in [2, 64])")
    run = p.module()
    for n in (2, 9):
        x = kiln.randn(n, 3)
        assert bool(kiln.allclose(run(x, w), affine(x, w), atol=1e-6))
        assert bool(kiln.allclose(run(x, w=w), affine(x, w), atol=1e-6))


def packed(x, y):
    s = x + y
    return {"sum": s.sum(1), "n": x.size(0), "rest": [x.shape[1], None, "t", (s * 2,)]}


def test_out_spec_packs_nested_outputs_and_ints():
    x, y = kiln.randn(4, 3), kiln.randn(4, 3)
    p = kiln.export(packed, (x, y), dynamic_shapes={"x": {0: B}, "y": {0: B}})
    assert p.out_spec == "{'sum': %0, 'n': %1, 'rest': [3, None, 't', (%2,)]}"
    assert [s.kind for s in p.output_specs] == ["tensor", "int", "tensor"]
    x, y = kiln.randn(6, 3), kiln.randn(6, 3)
    got, want = p.module()(x, y), packed(x, y)
    assert got["n"] == 6 and got["rest"][:3] == [3, None, "t"]
    assert bool(kiln.allclose(got["sum"], want["sum"]))
    assert bool(kiln.allclose(got["rest"][3][0], want["rest"][3][0]))


def test_same_dim_twice_is_one_symbol():
    p = kiln.export(packed, (kiln.randn(4, 3), kiln.randn(4, 3)),
                    dynamic_shapes=({0: B}, {0: B}))
    assert "(%x: f32[batch, 3], %y: f32[batch, 3])" in p.graph_text
    with pytest.raises(ValueError, match=r"input 'y' dim 0 \(batch\) is 3, but batch is 5 from "
                                         r"input 'x'"):
        p.module()(kiln.randn(5, 3), kiln.randn(3, 3))


def scaled(x):
    return x * GLOBAL_SCALE


def test_baked_tensors_become_constants():
    p = kiln.export(scaled, (kiln.randn(2, 3),))
    assert list(p.weights) == ["_constant0"]
    assert 'weight() {name = "_constant0"} : f32[3]' in p.graph_text
    x = kiln.randn(2, 3)
    assert bool(kiln.allclose(p.module()(x), scaled(x)))


def times(x, n):
    return x * n


def test_number_arguments_are_specialized():
    p = kiln.export(times, (kiln.randn(2, 3), 3))
    assert [s.name for s in p.input_specs] == ["x"]
    x = kiln.randn(2, 3)
    assert bool(kiln.allclose(p.module()(x), x * 3))


def test_export_leaves_no_cache_entries_and_unwraps_compiled():
    kiln._C._capture.reset()
    kiln.export(affine, (kiln.randn(2, 3), kiln.randn(3, 5)))
    assert kiln._C._capture.entries(affine.__code__) == []
    compiled = kiln.compile(affine)
    p = kiln.export(compiled, (kiln.randn(2, 3), kiln.randn(3, 5)))
    assert p.name == "affine"


def module_forward_graph_break_fn(x):
    y = x * 2
    if y.sum() > 0:  # a data-dependent branch: a graph break
        return y
    return -y


def test_graph_break_is_an_error_with_reason_and_line():
    with pytest.raises(CaptureError) as info:
        kiln.export(module_forward_graph_break_fn, (kiln.randn(3),))
    text = str(info.value)
    line = line_of(module_forward_graph_break_fn, "if y.sum() > 0")
    assert text.startswith("kiln.export: graph break: data-dependent branch")
    assert f"{__file__}:{line}: if y.sum() > 0:" in text


def specializes(x):
    if x.size(0) == 4:
        return x * 2
    return x


def bounded(x):
    if x.size(0) > 16:
        raise ValueError("too big")
    return x + 1


def needs_three(x):
    if x.size(0) < 3:
        raise ValueError("too small")
    return x + 1


def test_specialized_or_narrowed_dims_are_errors():
    x = kiln.randn(4, 3)
    with pytest.raises(ExportError, match=r"input 'x' dim 0 \(Dim 'batch'\) was specialized to 4"):
        kiln.export(specializes, (x,), dynamic_shapes={"x": {0: B}})
    with pytest.raises(ExportError, match=r"needs size <= 16.*kiln.Dim\('batch', min=2, max=16\)"):
        kiln.export(bounded, (x,), dynamic_shapes={"x": {0: B}})
    with pytest.raises(ExportError, match=r"needs size >= 3.*kiln.Dim\('batch', min=3, max=64\)"):
        kiln.export(needs_three, (x,), dynamic_shapes={"x": {0: B}})
    p = kiln.export(bounded, (x,), dynamic_shapes={"x": {0: kiln.Dim("b", max=16)}})
    assert p.range_constraints == {"b": (2, 16)}
    kiln.export(specializes, (x,))  # a static dim may be specialized


def test_dim_checks():
    with pytest.raises(ValueError, match=r"min=1 is not allowed: sizes 0 and 1 are specialized"):
        kiln.Dim("batch", min=1)
    with pytest.raises(ValueError, match="min=0"):
        kiln.Dim("batch", min=0)
    with pytest.raises(ValueError, match="max=3 is below min=4"):
        kiln.Dim("batch", min=4, max=3)
    for bad in ("1x", "max", "f32", "a-b", "", "for"):
        with pytest.raises(ValueError, match="not a valid symbol name"):
            kiln.Dim(bad)
    assert repr(kiln.Dim("n", max=8)) == "Dim('n', min=2, max=8)"


def test_dynamic_shapes_and_argument_errors():
    x, w = kiln.randn(4, 3), kiln.randn(3, 5)
    with pytest.raises(ValueError, match=r"'z', which is not an argument \(arguments: x, w\)"):
        kiln.export(affine, (x, w), dynamic_shapes={"z": {0: B}})
    with pytest.raises(ValueError, match="dim 2 of 'x' is out of range for a 2-d tensor"):
        kiln.export(affine, (x, w), dynamic_shapes={"x": {2: B}})
    with pytest.raises(ValueError, match=r"'x' has size 4 at dim 0, outside small's range"):
        kiln.export(affine, (x, w), dynamic_shapes={"x": {0: kiln.Dim("small", max=3)}})
    with pytest.raises(ValueError, match="dynamic_shapes has 1 entries for 2 arguments"):
        kiln.export(affine, (x, w), dynamic_shapes=({0: B},))
    with pytest.raises(TypeError, match="must be a kiln.Dim"):
        kiln.export(affine, (x, w), dynamic_shapes={"x": {0: 5}})
    with pytest.raises(ExportError, match="two different Dims are named 'batch'"):
        kiln.export(affine, (x, kiln.randn(3, 4)),
                    dynamic_shapes={"x": {0: B}, "w": {1: kiln.Dim("batch")}})
    with pytest.raises(TypeError, match="example_args must be a tuple"):
        kiln.export(affine, [x, w])
    with pytest.raises(TypeError, match="example argument 1 is a str"):
        kiln.export(affine, (x, "w"))
    with pytest.raises(TypeError, match="example_args do not fit affine"):
        kiln.export(affine, (x,))
    with pytest.raises(TypeError, match="expects a function, method or kiln.nn.Module"):
        kiln.export(42, (x,))


def test_module_call_errors():
    p = kiln.export(affine, (kiln.randn(4, 3), kiln.randn(3, 5)), dynamic_shapes=({0: B}, None))
    run = p.module()
    w = kiln.randn(3, 5)
    with pytest.raises(TypeError, match=r"input 'x' has dtype float64, expected float32"):
        run(kiln.randn(4, 3, dtype=kiln.float64), w)
    with pytest.raises(ValueError, match=r"input 'w' has size 4 at dim 1, expected 5"):
        run(kiln.randn(4, 3), kiln.randn(3, 4))
    with pytest.raises(TypeError, match=r"affine takes 2 arguments \(x, w\), got 1"):
        run(kiln.randn(4, 3))
    with pytest.raises(TypeError, match="missing argument 'w'"):
        run(x=kiln.randn(4, 3))
    with pytest.raises(TypeError, match=r"unexpected arguments \['v'\]"):
        run(kiln.randn(4, 3), w=w, v=1)


def test_save_creates_the_folder_and_readable_files(tmp_path):
    program = kiln.export(lambda x: x * 2 + 1, (kiln.randn(3),))
    old = os.umask(0o022)
    try:
        program.save(tmp_path / "new" / "deeper" / "prog")
    finally:
        os.umask(old)
    for suffix in (".kir", ".safetensors"):
        path = tmp_path / "new" / "deeper" / ("prog" + suffix)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in (tmp_path / "new" / "deeper").iterdir() if p.name.startswith(".")] == []


def test_an_op_without_a_compiled_form_is_an_export_error():
    @kiln.compiler.allow_in_graph
    def opaque(x):
        return kiln.erfc(x)

    def f(x):
        return opaque(x) + 1  # an opaque `call`: needs Python to run

    with pytest.raises(ExportError, match=r"cannot run without Python: .*call.*test_export_api"):
        kiln.export(f, (kiln.randn(4),))
