"""One process of kiln.multiprocessing.spawn's MPI job: imports the parent's main script as
``__mp_main__`` (so `fn`, pickled by reference, resolves), then calls ``fn(rank, *args)``."""

from __future__ import annotations

import os
import pickle
import sys
import types


def main() -> None:
    payload, script = sys.argv[1], sys.argv[2]
    with open(payload, "rb") as f:
        # the parent's argv, as multiprocessing's spawn gives its children, before the script
        sys.argv = pickle.load(f)  # noqa: S301 - written by the parent process
        if script:
            sys.path.insert(0, os.path.dirname(script))
            module = types.ModuleType("__mp_main__")
            module.__file__ = script
            sys.modules["__mp_main__"] = sys.modules["__main__"] = module
            with open(script, encoding="utf-8") as source:
                code = compile(source.read(), script, "exec")
            exec(code, module.__dict__)  # noqa: S102 - the user's script, as multiprocessing does
        fn, args = pickle.load(f)  # noqa: S301
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    fn(rank, *args)


if __name__ == "__main__":
    main()
