"""kiln.multiprocessing: torch.multiprocessing's names, and ``spawn`` for distributed training.

Python's multiprocessing is re-exported (``Process``, ``Queue``, ``get_context``, ...). ``spawn`` is
what the torch DDP tutorials call: ``spawn(fn, args=(world_size,), nprocs=world_size)`` runs
``fn(rank, *args)`` in `nprocs` new processes that, unlike multiprocessing's, are one Open MPI job
(started with mpirun, like ``kilnrun``), so ``init_process_group("gloo" or "mpi", rank=rank,
world_size=world_size)`` inside `fn` joins them. As with multiprocessing's spawn, each process gets
the parent's ``sys.argv``, imports the main script as ``__mp_main__`` (its ``if __name__ ==
"__main__":`` block does not run again) and unpickles `fn` and `args`. A process that raises ends
the job; ``spawn`` raises ``ProcessRaisedException`` with its output.
"""

from __future__ import annotations

import multiprocessing as _mp
import os
import pickle
import subprocess
import sys
import tempfile
from multiprocessing import *  # noqa: F403 - torch.multiprocessing re-exports these

from kiln.multiprocessing._mpirun import mpirun_command

__all__ = ["ProcessContext", "ProcessExitedException", "ProcessRaisedException", "spawn",
           *_mp.__all__]  # fmt: skip


class ProcessRaisedException(Exception):  # noqa: N818 - torch's name
    """A spawned process raised; the message holds what it printed."""


class ProcessExitedException(ProcessRaisedException):
    """A spawned process exited with a non-zero status."""


class ProcessContext:
    """The job `spawn(join=False)` returns: ``join()`` waits for it (True once it ended)."""

    def __init__(self, proc: subprocess.Popen, nprocs: int, payload: str):
        self._proc, self._payload = proc, payload
        self.processes = [proc] * nprocs

    def pids(self):
        return [self._proc.pid]

    def join(self, timeout=None) -> bool:
        try:
            out, _ = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        try:
            os.unlink(self._payload)
        except OSError:
            pass
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
        if self._proc.returncode != 0:
            raise ProcessRaisedException(
                f"kiln.multiprocessing.spawn: the job exited with status {self._proc.returncode}"
                f"; its output ends:\n{out[-4000:] if out else ''}"
            )
        return True


def _mpirun_command(nprocs: int, argv: list[str]) -> tuple[list[str], dict]:
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    try:
        return mpirun_command(nprocs, argv, env)
    except RuntimeError as e:
        raise RuntimeError(f"kiln.multiprocessing.spawn: {e}") from None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Runs ``fn(rank, *args)`` in `nprocs` processes of one MPI job (module docstring)."""
    if nprocs < 1:
        raise ValueError(f"kiln.multiprocessing.spawn: nprocs must be at least 1, got {nprocs}")
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    fd, payload = tempfile.mkstemp(prefix="kiln_spawn_", suffix=".pkl")
    with os.fdopen(fd, "wb") as f:
        try:
            pickle.dump(list(sys.argv), f)  # read before the main script is imported
            pickle.dump((fn, tuple(args)), f)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            os.unlink(payload)
            raise ValueError(f"kiln.multiprocessing.spawn: fn and args must be picklable (a "
                             f"function defined at module level): {e}") from e  # fmt: skip
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_spawn_worker.py")
    cmd, env = _mpirun_command(nprocs, [sys.executable, worker, payload,
                                        os.path.abspath(main) if main else ""])  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    context = ProcessContext(proc, nprocs, payload)
    if not join:
        return context
    context.join()
    return None
