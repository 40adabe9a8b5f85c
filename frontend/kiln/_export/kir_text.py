"""What an exported program's `.kir` text declares about its interface.

Reads the canonical text the C++ printer writes (``kiln._C._ir.parse_and_print``): one
statement per line. Only the parts that make the program's interface are read: the graph's
parameters, ``sym_constrain_range`` and ``weight`` nodes, the return's operands with their types,
and its ``out_spec``. The C++ parser checks the text first, so this reader only has to
understand well-formed text; the grammar is in ir/README.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KirInterface", "TypeText", "read_interface"]

_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_DTYPES = {
    "b8": "bool", "u8": "uint8", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
}  # fmt: skip
_INT = re.compile(r"[0-9]+\Z")


@dataclass(frozen=True)
class TypeText:
    """A value's type: kind ``tensor`` (dtype name, sizes: int or symbolic text) or a scalar
    kind ``int``/``float``/``bool`` (dtype None, no sizes)."""

    kind: str
    dtype: str | None = None
    sizes: tuple = ()


@dataclass
class KirInterface:
    name: str
    params: list  # (name, TypeText)
    ranges: dict  # symbol -> (min, max | None)
    weights: list  # (key, TypeText)
    outputs: list  # (value name, TypeText)
    out_spec: str | None


def _unquote(literal: str) -> str:
    """The text of a .kir string literal (escapes over UTF-8 bytes)."""
    body, out, i = literal[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            if nxt == "x":
                out.append(int(body[i + 2 : i + 4], 16))
                i += 4
                continue
            out += {"n": b"\n", "t": b"\t"}.get(nxt, nxt.encode("utf-8"))
            i += 2
            continue
        out += c.encode("utf-8")
        i += 1
    return out.decode("utf-8", errors="replace")


def _hide_strings(line: str) -> tuple[str, list[str]]:
    """`line` with each string literal replaced by ``"<k>"``, and the decoded strings."""
    strings: list[str] = []

    def keep(m):
        strings.append(_unquote(m.group(0)))
        return f'"{len(strings) - 1}"'

    return _STRING.sub(keep, line), strings


def _split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail or parts:
        parts.append(tail)
    return parts


def _find_top(text: str, ch: str) -> int:
    depth = 0
    for i, c in enumerate(text):
        if c == ch and depth == 0:
            return i
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
    return -1


def _strip_loc(text: str) -> str:
    return re.sub(r'\s*loc\("[0-9]+"\s*:\s*[0-9]+\)\s*$', "", text).strip()


def parse_type(text: str) -> TypeText:
    text = _strip_loc(text)
    if text in ("int", "float", "bool"):
        return TypeText(text)
    m = re.match(r"([a-z0-9]+)\[(.*?)\]", text)
    if m is None or m.group(1) not in _DTYPES:
        raise ValueError(f"unexpected type text {text!r}")
    sizes = tuple(int(s) if _INT.match(s) else s for s in _split_top(m.group(2)))
    return TypeText("tensor", _DTYPES[m.group(1)], sizes)


def _attrs(text: str, strings: list[str]) -> dict:
    """``{k = v, ...}`` (strings hidden) as a dict of str/int/text values."""
    out = {}
    for item in _split_top(text.strip()[1:-1]):
        key, _, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key.startswith('"'):
            key = strings[int(key[1:-1])]
        if value.startswith('"'):
            out[key] = strings[int(value[1:-1])]
        elif re.fullmatch(r"-?\s*[0-9]+", value):
            out[key] = int(value.replace(" ", ""))
        else:
            out[key] = value
    return out


def read_interface(text: str) -> KirInterface:
    """The interface of the one graph of canonical `text` (ValueError when there is not one)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    headers = [i for i, ln in enumerate(lines) if ln.startswith("graph @")]
    if len(headers) != 1:
        raise ValueError(f"an exported program holds exactly one graph, found {len(headers)}")
    header, strings = _hide_strings(lines[headers[0]])
    m = re.match(r"graph @([A-Za-z0-9_]+)\((.*)\)\s*\{\s*$", header)
    if m is None:
        raise ValueError("malformed graph header")
    params = []
    for p in _split_top(m.group(2)):
        pname, _, ptype = p.partition(":")
        params.append((pname.strip()[1:], parse_type(ptype)))
    types = {name: t for name, t in params}
    ranges: dict = {}
    weights: list = []
    outputs: list = []
    out_spec = None
    for raw in lines[headers[0] + 1 :]:
        line, strings = _hide_strings(raw.strip())
        if line == "}":
            break
        if line.startswith("return"):
            body = line[len("return") :].strip()
            brace = _find_top(body, "{")
            if brace >= 0:
                out_spec = _attrs(body[brace:].rsplit("}", 1)[0] + "}", strings).get("out_spec")
                body = body[:brace]
            for ref in _split_top(_strip_loc(body)):
                outputs.append((ref[1:], types[ref[1:]]))
            continue
        eq = _find_top(line, "=")
        results = [r.strip()[1:] for r in line[:eq].split(",")] if eq >= 0 else []
        rest = line[eq + 1 :].strip() if eq >= 0 else line
        op = rest[: rest.index("(")].strip()
        colon = _find_top(rest, ":")
        head = rest[:colon] if colon >= 0 else _strip_loc(rest)
        brace = _find_top(head, "{")
        attrs = _attrs(head[brace:].strip(), strings) if brace >= 0 else {}
        result_types = [parse_type(t) for t in _split_top(rest[colon + 1 :])] if colon >= 0 else []
        for r, t in zip(results, result_types, strict=False):
            types[r] = t
        if op == "sym_constrain_range":
            hi = attrs["max"]
            ranges[attrs["symbol"]] = (attrs["min"], None if hi == -1 else hi)
        elif op == "weight":
            weights.append((attrs["name"], result_types[0]))
    return KirInterface(m.group(1), params, ranges, weights, outputs, out_spec)
