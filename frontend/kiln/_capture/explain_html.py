"""The HTML form of explain reports (kiln-explain --html): one self-contained page.

Per compiled function: the counts, each graph's Python source and `.kir` text, each graph break
with its reason, hint and the user's source around the breaking line (that line highlighted),
the guards of every capture and the recompiles with the guard that failed. No scripts, no
external stylesheets: the page is a single file that can be mailed or attached to an issue.
"""

from __future__ import annotations

import html
import linecache
import os
import tempfile

__all__ = ["CONTEXT_LINES", "render", "source_context", "write_atomic"]

CONTEXT_LINES = 3

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05em; margin-bottom: 0.3em; }
pre { background: #f6f8fa; padding: 0.6em; overflow-x: auto; font-size: 0.9em; }
table.counts td { padding: 0 1em 0 0; }
.break { border-left: 4px solid #d73a49; padding-left: 0.8em; margin: 1em 0; }
.hint { color: #22863a; } .reason { font-weight: bold; }
.src .hl { background: #ffdce0; font-weight: bold; display: inline-block; width: 100%; }
.lineno { color: #999; user-select: none; }
.none { color: #777; font-style: italic; }
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def source_context(filename: str, lineno: int, radius: int = CONTEXT_LINES) -> list:
    """[(lineno, text, is_break_line)] for the lines `lineno` ± `radius` of `filename` that
    exist (none when the source cannot be read)."""
    lines = linecache.getlines(filename)
    first, last = max(1, lineno - radius), min(len(lines), lineno + radius)
    return [(n, lines[n - 1].rstrip("\n"), n == lineno) for n in range(first, last + 1)]


def _context_html(filename: str, lineno: int) -> str:
    rows = source_context(filename, lineno)
    if not rows:
        return '<p class="none">(source not available)</p>'
    width = len(str(rows[-1][0]))
    out = []
    for n, text, hit in rows:
        line = f'<span class="lineno">{n:>{width}}</span>  {_e(text)}'
        out.append(f'<span class="hl">{line}</span>' if hit else line)
    return '<pre class="src">' + "\n".join(out) + "</pre>"


def _kir(graph) -> str:
    try:
        return graph.to_kir()
    except Exception as e:  # an op without a .kir form: say so, keep the rest of the report
        return f"(no .kir form: {type(e).__name__}: {e})"


def _section(title: str, out) -> list:
    parts = [f"<h2>{_e(title)}</h2>", '<table class="counts">']
    for label, value in (("Graph Count", out.graph_count),
                         ("Graph Break Count", out.graph_break_count),
                         ("Op Count", out.op_count), ("Recompiles", len(out.recompiles))):
        parts.append(f"<tr><td>{label}</td><td>{value}</td></tr>")
    parts.append("</table>")

    parts.append("<h3>Graph breaks</h3>")
    if not out.break_reasons:
        parts.append('<p class="none">none</p>')
    for i, br in enumerate(out.break_reasons, 1):
        parts.append('<div class="break">')
        parts.append(f'<p><span class="reason">Break {i}: {_e(br.reason)}</span><br>'
                     f"{_e(br.filename)}:{br.lineno} in {_e(br.function)}: "
                     f"<code>{_e(br.source_line)}</code><br>"
                     f'<span class="hint">hint: {_e(br.hint)}</span></p>')
        parts.append(_context_html(br.filename, br.lineno))
        parts.append("</div>")

    parts.append("<h3>Graphs</h3>")
    kept = [c for c in out.captures if c.ops]
    if not kept:
        parts.append('<p class="none">none</p>')
    for i, c in enumerate(kept, 1):
        parts.append(f"<h4>Graph {i}: {_e(c.name)} (in {_e(c.function)}, "
                     f"{len(c.ops)} ops)</h4>")
        parts.append(f"<p>Ops: {_e(', '.join(c.ops))}</p>")
        parts.append(f"<pre>{_e(c.graph.python_source())}</pre>")
        parts.append(f"<pre>{_e(_kir(c.graph))}</pre>")

    parts.append("<h3>Guards</h3>")
    if not out.captures:
        parts.append('<p class="none">none</p>')
    for c in out.captures:
        parts.append(f"<h4>{_e(c.name)} (in {_e(c.function)})</h4>")
        parts.append("<pre>" + "\n".join(_e(g) for g in c.guards) + "</pre>")

    parts.append("<h3>Recompiles</h3>")
    if not out.recompiles:
        parts.append('<p class="none">none</p>')
    else:
        parts.append("<ol>" + "".join(f"<li>{_e(r.where)}: guard failed: "
                                       f"<code>{_e(r.reason)}</code></li>"
                                       for r in out.recompiles) + "</ol>")
    return parts


def render(sections, title: str = "kiln-explain report", notes=()) -> str:
    """The page for `sections`, a list of (heading, ExplainOutput); `notes` are lines shown at
    the top (for example the script's exception)."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{_e(title)}</h1>"]
    parts += [f"<pre>{_e(note)}</pre>" for note in notes]
    if not sections:
        parts.append('<p class="none">No compiled function was captured.</p>')
    for heading, out in sections:
        parts += _section(heading, out)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Writes `text` to `path` through a temporary file in the same folder and a rename, so
    readers never see a partial report and a failure leaves any previous file intact."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".kiln-explain-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
