"""What kilnrun starts in each process of the MPI job: sets torchrun's environment variables
from Open MPI's, then runs the user's script as `python script.py args` would.

torch scripts read their place in the job from the environment before (or instead of) asking
the process group: nanoGPT's `ddp = int(os.environ.get('RANK', -1)) != -1`, `LOCAL_RANK` for the
device. mpirun sets OMPI_COMM_WORLD_RANK and the like; this gives the script RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the machine's index), and MASTER_ADDR / MASTER_PORT
when unset (kiln's process group does not use them: MPI connects the ranks). It does not import
kiln.
"""

from __future__ import annotations

import os
import runpy
import sys

_FROM_MPI = {
    "RANK": "OMPI_COMM_WORLD_RANK",
    "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
    "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK",
    "LOCAL_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE",
}


def torchrun_environment(env) -> dict:
    """torchrun's variables for a process whose Open MPI variables are in `env`."""
    out = {name: env[mpi] for name, mpi in _FROM_MPI.items() if mpi in env}
    if "RANK" in out and "LOCAL_WORLD_SIZE" in out:  # the machine's index, kilnrun's layout
        out["GROUP_RANK"] = str(int(out["RANK"]) // int(out["LOCAL_WORLD_SIZE"]))
    out["MASTER_ADDR"] = env.get("MASTER_ADDR", "127.0.0.1")
    out["MASTER_PORT"] = env.get("MASTER_PORT", "29500")
    return out


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: kilnrun_worker.py script.py [args...]")
    os.environ.update(torchrun_environment(os.environ))
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script.py` sets it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
