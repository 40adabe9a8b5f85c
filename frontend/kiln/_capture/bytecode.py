"""Resume functions: the rest of a frame from any instruction, as a new code object.

After a graph break, execution continues in a *resume function*: the original bytecode with a
short prologue that restores the frame's state and jumps to the resume point. It takes every
local variable as a positional argument plus one tuple, `__kiln_resume`, holding the live cells
and the value stack. Because CPython 3.11 jumps are relative, the original instructions are
reused unchanged except that closure-variable indices move by one (the new argument is a local,
and locals come before cells and free variables); the exception table is shifted by the prologue
length, and the line table marks the prologue as having no location, so tracebacks and
diagnostics still name the user's lines. A resume function is called like any Python function,
so the frame hook captures it in turn.
"""

from __future__ import annotations

import dis
import types

_OP = dis.opmap
_CACHES = dis._inline_cache_entries
_DEREF_OPS = {
    _OP[name]
    for name in ("LOAD_DEREF", "STORE_DEREF", "DELETE_DEREF", "LOAD_CLOSURE", "MAKE_CELL",
                 "LOAD_CLASSDEREF")
}
RESUME_ARG = "__kiln_resume"
_UNBOUND = object()


class Unbound:
    """Passed for a local that is not bound at the resume point; the prologue deletes it."""

    def __repr__(self) -> str:
        return "<unbound>"


UNBOUND = Unbound()


def _emit(out: bytearray, opname: str, arg: int = 0) -> None:
    for shift in (24, 16, 8):
        if arg >> shift:
            out += bytes((_OP["EXTENDED_ARG"], (arg >> shift) & 255))
    arg &= 255
    op = _OP[opname]
    out += bytes((op, arg))
    out += bytes(2 * _CACHES[op])


def _write_varint(out: bytearray, value: int, first: bool) -> None:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    for i, chunk in enumerate(chunks):
        byte = chunk | (64 if i < len(chunks) - 1 else 0)
        if first and i == 0:
            byte |= 128
        out.append(byte)


def _shifted_exception_table(code, shift_units: int) -> bytes:
    out = bytearray()
    for e in dis._parse_exception_table(code):
        _write_varint(out, e.start // 2 + shift_units, True)
        _write_varint(out, (e.end - e.start) // 2, False)
        _write_varint(out, e.target // 2 + shift_units, False)
        _write_varint(out, (e.depth << 1) | int(e.lasti), False)
    return bytes(out)


def _no_location_prefix(units: int) -> bytes:
    out = bytearray()
    while units > 0:
        n = min(units, 8)
        out.append(0x80 | (15 << 3) | (n - 1))
        units -= n
    return bytes(out)


def _shift_deref_args(co_code: bytes, first_shifted: int) -> bytes:
    """Adds 1 to closure-variable indices >= first_shifted (cells that are not arguments and
    free variables moved one slot up)."""
    code = bytearray(co_code)
    ext = 0
    for i in range(0, len(code), 2):
        op, arg = code[i], code[i + 1]
        if op == _OP["EXTENDED_ARG"]:
            ext = (ext | arg) << 8
            continue
        full = ext | arg
        ext = 0
        if op in _DEREF_OPS and full >= first_shifted:
            if full + 1 > 255 or (i >= 2 and code[i - 2] == _OP["EXTENDED_ARG"]):
                raise ValueError("closure index needs EXTENDED_ARG")
            code[i + 1] = full + 1
    return bytes(code)


def loop_ranges(code) -> list[tuple[int, int]]:
    """(start, end) offsets of every backward jump: instructions inside run more than once."""
    ranges = []
    for inst in dis.get_instructions(code):
        if inst.opname.startswith(("JUMP_BACKWARD", "POP_JUMP_BACKWARD")):
            ranges.append((inst.argval, inst.offset))
    return ranges


def in_loop(code, offset: int) -> bool:
    return any(start <= offset <= end for start, end in loop_ranges(code))


def in_exception_region(code, offset: int) -> bool:
    return any(e.start <= offset < e.end for e in dis._parse_exception_table(code))


def _fresh_name(varnames) -> str:
    """The prologue's argument name; a resume function of a resume function gets another."""
    name, k = RESUME_ARG, 0
    while name in varnames:
        k += 1
        name = f"{RESUME_ARG}{k}"
    return name


def _emit_item(out: bytearray, tuple_slot: int, const_index: int) -> None:
    """Pushes `localsplus[tuple_slot][co_consts[const_index]]`."""
    _emit(out, "LOAD_FAST", tuple_slot)
    _emit(out, "LOAD_CONST", const_index)
    _emit(out, "BINARY_SUBSCR")


def make_resume_code(code, offset: int, stack_depth: int, unbound: frozenset,
                     null_slots: frozenset = frozenset()):
    """The resume function's code object: continues `code` at `offset` with `stack_depth` values
    on the stack. Its arguments are code.co_varnames (in order) then `__kiln_resume`, the tuple
    (cell objects of co_cellvars..., stack values from top to bottom). `null_slots` are the
    stack positions (0 = bottom) that hold the interpreter's NULL (below a callable): the
    prologue pushes a real NULL there, whatever the tuple holds at that position."""
    varnames = code.co_varnames
    nvars = len(varnames)
    cell_slots = []
    # localsplus: varnames, then cellvars that are not arguments, then freevars.
    extra_cells = [c for c in code.co_cellvars if c not in varnames]
    for name in code.co_cellvars:
        slot = varnames.index(name) if name in varnames else nvars + 1 + extra_cells.index(name)
        cell_slots.append(slot)
    prologue = bytearray()
    if code.co_freevars:
        _emit(prologue, "COPY_FREE_VARS", len(code.co_freevars))
    _emit(prologue, "RESUME", 0)
    n_extra = len(cell_slots) + stack_depth
    consts = code.co_consts
    if null_slots:  # NULLs cannot travel in a tuple: index the tuple slot by slot instead
        consts = consts + tuple(range(n_extra))
        for k, slot in enumerate(cell_slots):
            _emit_item(prologue, nvars, len(code.co_consts) + k)
            _emit(prologue, "STORE_FAST", slot)
        for j in range(stack_depth):  # bottom to top; the tuple holds the top first
            if j in null_slots:
                _emit(prologue, "PUSH_NULL")
            else:
                _emit_item(prologue, nvars,
                           len(code.co_consts) + len(cell_slots) + stack_depth - 1 - j)
    elif n_extra:
        _emit(prologue, "LOAD_FAST", nvars)
        _emit(prologue, "UNPACK_SEQUENCE", n_extra)
        for slot in cell_slots:
            _emit(prologue, "STORE_FAST", slot)
    for name in sorted(unbound, key=varnames.index):
        _emit(prologue, "DELETE_FAST", varnames.index(name))
    _emit(prologue, "LOAD_CONST", 0)  # placeholder: JUMP_FORWARD is emitted after sizing
    del prologue[-2:]
    jump_at = len(prologue)
    body_start = jump_at + 2
    delta_units = (body_start + offset - (jump_at + 2)) // 2
    if delta_units > 255:
        ext = bytearray()
        _emit(ext, "EXTENDED_ARG", delta_units >> 8)
        body_start += 2
        delta_units = (body_start + offset - (jump_at + 4)) // 2
        prologue += ext
        _emit(prologue, "JUMP_FORWARD", delta_units & 255)
    else:
        _emit(prologue, "JUMP_FORWARD", delta_units)
    shift_units = len(prologue) // 2
    body = _shift_deref_args(code.co_code, nvars)
    new_code = bytes(prologue) + body
    flags = code.co_flags & ~(
        0x04 | 0x08  # CO_VARARGS, CO_VARKEYWORDS: those locals become plain arguments
    )
    name = f"__resume_at_{offset}_{code.co_name}"
    return code.replace(
        co_code=new_code,
        co_consts=consts,
        co_argcount=nvars + 1,
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=flags,
        co_varnames=varnames + (_fresh_name(varnames),),
        co_nlocals=nvars + 1,
        co_linetable=_no_location_prefix(shift_units) + code.co_linetable,
        co_exceptiontable=_shifted_exception_table(code, shift_units),
        co_stacksize=max(code.co_stacksize, n_extra + 2),
        co_name=name,
        co_qualname=name,
    )


def make_resume_function(code, offset, stack_depth, unbound, globals_, closure):
    resume_code = make_resume_code(code, offset, stack_depth, unbound)
    return types.FunctionType(resume_code, globals_, resume_code.co_name, None, closure)


def resume_args(code, locals_: dict, cells: dict, stack: list) -> tuple:
    """Positional arguments for a resume function: every local (UNBOUND if not bound), then
    the tuple of cells (in co_cellvars order) and stack values (top first)."""
    values = [locals_.get(name, UNBOUND) for name in code.co_varnames]
    extra = tuple(cells[name] for name in code.co_cellvars) + tuple(reversed(stack))
    return (*values, extra)
