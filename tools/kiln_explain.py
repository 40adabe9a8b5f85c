#!/usr/bin/env python3
"""kiln-explain: runs a Python script and reports what kiln.compile captured in it.

    kiln-explain script.py [args...] [--function NAME] [--html report.html]

The script runs as `__main__` with `sys.argv` = [script, args...]. Every function or module that
`kiln.compile` wraps while it runs is instrumented: each of its captures is recorded (graphs,
graph breaks with file:line, source line and a suggested fix, guards, recompiles with the guard
that failed) and reported per compiled function after the script ends. `--function NAME` (may be
repeated) keeps the functions with that name or qualified name (for a module: its class name).
`--html FILE` also writes a self-contained HTML report. kiln-explain's own options may come
before or after the script's arguments; everything after `--` goes to the script.

Exit status: 0; 1 when the script raised (the traceback is printed and the report still shows
what was captured) or when --function matched nothing; 2 for usage errors and a missing script.
"""

from __future__ import annotations

import functools
import os
import runpy
import sys
import traceback

USAGE = "usage: kiln-explain script.py [args...] [--function NAME] [--html FILE] [-- args...]"


class UsageError(Exception):
    """A bad command line: reported with the usage line, exit status 2."""


def parse_args(argv: list[str]):
    """(script, script_args, function_names, html_path) from the command line; None for
    --help."""
    script, rest, names, html_path = None, [], [], None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            if script is None and i + 1 < len(argv):
                script, rest = argv[i + 1], argv[i + 2:]
            else:
                rest += argv[i + 1:]
            break
        if arg in ("-h", "--help"):
            return None
        option, eq, value = arg.partition("=")
        if option in ("--function", "--html"):
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{option} needs a value")
                i += 1
                value = argv[i]
            if option == "--function":
                names.append(value)
            else:
                html_path = value
        elif script is None:
            if arg.startswith("-"):
                raise UsageError(f"unknown option {arg}")
            script = arg
        else:
            rest.append(arg)
        i += 1
    if script is None:
        raise UsageError("no script given")
    return script, rest, names, html_path


def _location(fn) -> tuple[str, int]:
    code = getattr(fn, "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else ("?", 0)


class CompiledFunction:
    """One kiln.compile() result seen while the script ran, and every capture it made."""

    def __init__(self, target) -> None:
        import kiln

        if isinstance(target, kiln.nn.Module):
            cls = type(target)
            self.name = cls.__name__
            self.qualname = f"{cls.__qualname__}.forward"
            self.filename, self.lineno = _location(cls.forward)
            self.kind = "module"
        else:
            self.name = getattr(target, "__name__", type(target).__name__)
            self.qualname = getattr(target, "__qualname__", self.name)
            self.filename, self.lineno = _location(target)
            self.kind = "function"
        self.records: list = []

    def matches(self, names: list[str]) -> bool:
        return not names or self.name in names or self.qualname in names

    @property
    def heading(self) -> str:
        return f"{self.kind} {self.qualname} ({self.filename}:{self.lineno})"

    def output(self):
        from kiln._capture.explain import ExplainOutput

        return ExplainOutput(self.records)


class CompileSession:
    """While active, `kiln.compile` records the captures of everything it wraps."""

    def __init__(self) -> None:
        self.functions: list[CompiledFunction] = []
        self._saved = None

    def _register(self, target, compiled):
        entry = CompiledFunction(target)
        compiler = getattr(compiled, "_kiln_compiler", None)
        if compiler is None:  # an OptimizedModule
            compiler = compiled._compiled_call._kiln_compiler
        if compiler.recorder is None:
            compiler.recorder = entry.records
        else:
            entry.records = compiler.recorder
        self.functions.append(entry)
        return compiled

    def __enter__(self) -> CompileSession:
        import kiln
        import kiln._capture.compile as compile_module

        original = compile_module.compile

        @functools.wraps(original)
        def compile(model=None, **kwargs):  # noqa: A001 - replaces kiln.compile
            result = original(model, **kwargs)
            if model is None:  # used as @kiln.compile(...): instrument what it decorates
                return lambda m: self._register(m, result(m))
            return self._register(model, result)

        self._saved = (kiln.compile, compile_module.compile)
        kiln.compile = compile_module.compile = compile
        return self

    def __exit__(self, *exc) -> None:
        import kiln
        import kiln._capture.compile as compile_module

        kiln.compile, compile_module.compile = self._saved


def run_script(script: str, args: list[str]) -> BaseException | None:
    """Runs `script` as __main__ with sys.argv and sys.path[0] as Python would set them; returns
    the exception it raised (None when it finished or exited with status 0)."""
    saved_argv, saved_path0 = sys.argv, sys.path[0]
    sys.argv = [script] + list(args)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        return None if e.code in (None, 0) else e
    except BaseException as e:  # noqa: B036 - report whatever the script raised
        return e
    finally:
        sys.argv, sys.path[0] = saved_argv, saved_path0
    return None


def _describe_failure(error: BaseException, script: str) -> str:
    """What went wrong, with the traceback starting at the script's own frames (kiln-explain's
    and runpy's frames are dropped)."""
    if isinstance(error, SystemExit):
        return f"the script exited with status {error.code}"
    tb, path = error.__traceback__, os.path.realpath(script)
    while tb is not None and os.path.realpath(tb.tb_frame.f_code.co_filename) != path:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb or error.__traceback__))
    return "the script raised an exception:\n" + text.rstrip()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parsed = parse_args(argv)
    except UsageError as e:
        print(f"kiln-explain: error: {e}\n{USAGE}", file=sys.stderr)
        return 2
    if parsed is None:
        print(__doc__)
        return 0
    script, args, names, html_path = parsed
    if not os.path.isfile(script):
        print(f"kiln-explain: error: no such script: {script}", file=sys.stderr)
        return 2
    html_path = os.path.abspath(html_path) if html_path else None  # the script may chdir

    session = CompileSession()
    with session:
        error = run_script(script, args)
    sys.stdout.flush()
    status, notes = 0, []
    if error is not None:
        notes.append(_describe_failure(error, script))
        print(f"kiln-explain: {notes[0]}", file=sys.stderr)
        status = 1

    chosen = [f for f in session.functions if f.matches(names)]
    print("=" * 78)
    if not session.functions:
        print("kiln-explain: no function was compiled with kiln.compile")
    elif not chosen:
        known = ", ".join(sorted({f.qualname for f in session.functions}))
        print(f"kiln-explain: no compiled function named {', '.join(names)} (compiled: {known})")
        status = status or 1
    sections = [(f.heading, f.output()) for f in chosen]
    for heading, out in sections:
        print(f"==== {heading}")
        print(out.report(sources=True))
    sys.stdout.flush()

    if html_path:
        from kiln._capture import explain_html

        title = f"kiln-explain {os.path.basename(script)}"
        try:
            explain_html.write_atomic(html_path, explain_html.render(sections, title, notes))
        except OSError as e:
            print(f"kiln-explain: error: cannot write {html_path}: {e}", file=sys.stderr)
            return 1
        print(f"kiln-explain: wrote {html_path}")
    return status


if __name__ == "__main__":
    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isdir(os.path.join(_root, "frontend", "kiln")):
        sys.path.insert(1, os.path.join(_root, "frontend"))  # a checkout without the .pth file
    sys.exit(main())
