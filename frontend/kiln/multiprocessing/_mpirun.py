"""The mpirun command line that starts kiln's multi-process jobs, for tools/kilnrun and
kiln.multiprocessing.spawn. Standard library only: kilnrun loads this file without importing
kiln."""

from __future__ import annotations

import os
import shutil


def mpirun_command(nprocs: int, argv: list[str], env: dict, *, hostfile=None, threads=None,
                   tag_output=False, cores=None) -> tuple[list[str], dict]:  # fmt: skip
    """(command, environment) running `argv` in `nprocs` processes. kiln's threads per process
    default to the cores shared out among them, unless `threads` or KILN_NUM_THREADS says
    otherwise; without a host file the job stays on this machine and may oversubscribe it.
    Raises RuntimeError when mpirun is missing."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun not found; install Open MPI (openmpi-bin)")
    env = dict(env)
    cores = cores or os.cpu_count() or 1
    env["KILN_NUM_THREADS"] = str(threads or int(env.get("KILN_NUM_THREADS") or
                                                 max(1, cores // nprocs)))  # fmt: skip
    cmd = [mpirun, "-np", str(nprocs), "--bind-to", "none", "-x", "KILN_NUM_THREADS",
           "-x", "PYTHONPATH"]  # fmt: skip
    if tag_output:
        cmd.append("--tag-output")
    cmd += ["--hostfile", hostfile] if hostfile else ["--oversubscribe"]
    if hasattr(os, "getuid") and os.getuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd + list(argv), env
