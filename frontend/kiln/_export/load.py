"""kiln.load_exported: reads ``NAME.kir`` and ``NAME.safetensors`` back into an ExportedProgram.

Loading only parses: the `.kir` text goes through the C++ parser and verifier (errors name
``file:line:col``), the weights through the safetensors reader (errors name the file and byte
offset), and the out_spec through a whitelist walker. Nothing from either file is executed.
"""

from __future__ import annotations

import os

import kiln
from kiln._export.program import ExportedProgram, split_path
from kiln._export.safetensors import SafetensorsError, load_file

__all__ = ["load_exported"]


def load_exported(path) -> ExportedProgram:
    """The program saved at `path` (``DIR/NAME`` or ``DIR/NAME.kir``)."""
    folder, name = split_path(path)
    kir_path = os.path.join(folder, name + ".kir")
    st_path = os.path.join(folder, name + ".safetensors")
    with open(kir_path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{kir_path}: byte {e.start}: the program is not valid UTF-8") from None
    kiln._C._ir.verify(text, kir_path)
    canonical = kiln._C._ir.parse_and_print(text, kir_path)
    weights, _ = load_file(st_path)
    try:
        program = ExportedProgram(canonical, weights, name)
    except ValueError as e:  # out_spec or interface problems: say which file
        raise type(e)(f"{kir_path}: {e}") from None
    for key, t in program.weight_specs.items():
        if key not in weights:
            raise SafetensorsError(f"{st_path}: byte 8: no tensor {key!r}, which the program "
                                   f"{kir_path} reads")
        w = weights[key]
        want = f"{t.dtype}{list(t.sizes)}"
        if w.dtype.name != t.dtype or tuple(w.shape) != tuple(t.sizes):
            raise SafetensorsError(f"{st_path}: byte 8: tensor {key!r} is "
                                   f"{w.dtype.name}{list(w.shape)}, the program {kir_path} "
                                   f"expects {want}")
    return program
