"""kilnrun: runs a training script in N processes of one Open MPI job, like torchrun.

    kilnrun --nproc-per-node N [--hostfile FILE] [--threads T] script.py [script args...]

On one machine it starts N local processes (`mpirun -np N`); with --hostfile (Open MPI's format:
one `host slots=K` line per machine, reachable by ssh) the job spans the listed machines and N
is the total. Each process's output lines start with `[rank]` (mpirun's --tag-output). kiln's
threads per process default to the machine's cores divided by the local processes (torchrun
sets OMP_NUM_THREADS=1; kiln keeps the cores busy instead), unless KILN_NUM_THREADS is set or
--threads is given. Each process gets torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR and MASTER_PORT (tools/kilnrun_worker.py sets them from Open MPI's before
the script runs), so torch scripts that read them work unchanged; kiln.distributed's
init_process_group takes the rank from MPI and checks them against it. If any process exits
with an error, mpirun stops the others and kilnrun exits with that status.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys


def parse(argv):
    p = argparse.ArgumentParser(prog="kilnrun", description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc", type=int, required=True)
    p.add_argument("--hostfile", help="Open MPI host file: the job spans these machines")
    p.add_argument("--threads", type=int, help="kiln threads per process")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def _mpirun():
    """frontend/kiln/multiprocessing/_mpirun.py, loaded by path: importing kiln would cost the
    launcher the whole package."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frontend", "kiln",
                        "multiprocessing", "_mpirun.py")  # fmt: skip
    spec = importlib.util.spec_from_file_location("kiln_mpirun", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command(a, python=sys.executable, cores=None):
    """The mpirun command line and environment for `a` (separate for tests)."""
    if a.nproc < 1:
        raise SystemExit("kilnrun: --nproc-per-node must be at least 1")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kilnrun_worker.py")
    try:
        return _mpirun().mpirun_command(a.nproc, [python, worker, a.script, *a.args],
                                        os.environ, hostfile=a.hostfile, threads=a.threads,
                                        tag_output=True, cores=cores)  # fmt: skip
    except RuntimeError as e:
        raise SystemExit(f"kilnrun: {e}") from None


def main(argv=None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    cmd, env = command(a)
    os.execve(cmd[0], cmd, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
