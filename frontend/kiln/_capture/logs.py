"""KILN_LOGS: events of the capture frontend, printed as they happen.

`KILN_LOGS=graph,graph_breaks,guards,recompiles,bytecode,aot` (comma list; `+topic` for debug
detail, `all` for everything) selects topics; messages go to stderr prefixed with the topic.
Messages may be callables so that expensive text is built only when the topic is on.
"""

from __future__ import annotations

import os
import sys

TOPICS = ("graph", "graph_breaks", "guards", "recompiles", "bytecode", "output_code", "perf",
          "aot")
_enabled: set = set()
_debug: set = set()


def configure(spec: str | None = None) -> None:
    """Reads the topic list (default: the KILN_LOGS environment variable)."""
    spec = os.environ.get("KILN_LOGS", "") if spec is None else spec
    _enabled.clear()
    _debug.clear()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        debug = item.startswith("+")
        name = item.lstrip("+")
        names = TOPICS if name == "all" else (name,)
        for n in names:
            if n not in TOPICS:
                print(f"[kiln] KILN_LOGS: unknown topic {n!r} (known: {', '.join(TOPICS)})",
                      file=sys.stderr)
                continue
            _enabled.add(n)
            if debug:
                _debug.add(n)


def enabled(topic: str) -> bool:
    return topic in _enabled


def log(topic: str, message) -> None:
    if topic in _enabled:
        text = message() if callable(message) else message
        print(f"[kiln:{topic}] {text}", file=sys.stderr, flush=True)


configure()
