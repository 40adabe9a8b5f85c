"""kiln.distributed's NCCL backend (distributed/nccl_group.h) for CUDA tensors:

- on any machine: the backend strings, and init_process_group("nccl") without a CUDA device or
  libnccl raising a RuntimeError that names what is missing, before MPI starts;
- without a GPU: the whole path (bindings, dispatch by device, argument checks, Work completion
  on a CUDA event, an asynchronous NCCL error aborting the communicator) over the fake libcuda
  and libnccl of tests/cpp, in a world of one;
- on GPUs (tests/gpu/run.sh): every collective on float32 and bfloat16 CUDA tensors against
  NumPy at 1 rank, and at 2 ranks with a timeout when 2 GPUs exist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
KILNRUN = os.path.join(ROOT, "tools", "kilnrun")
FAKE_CUDA = os.path.join(ROOT, "bazel-bin", "tests", "cpp", "libkiln_fake_cuda_staging.so")
FAKE_NCCL = os.path.join(ROOT, "bazel-bin", "tests", "cpp", "libkiln_fake_nccl.so")
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI not installed")


def python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, **env))  # fmt: skip


def kilnrun(n, *args, timeout=120, **env):
    env = dict(os.environ, KILN_NUM_THREADS="1", **env)
    return subprocess.run([KILNRUN, "--nproc-per-node", str(n),
                           os.path.join(HERE, "worker_nccl.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)  # fmt: skip


def probe():
    """(what NCCL misses on this machine, CUDA device count), asked in a fresh process."""
    run = python(
        "import kiln; from kiln import _C; "
        "print(kiln.cuda.device_count()); print(_C._distributed.nccl_unavailable_reason())"
    )
    assert run.returncode == 0, run.stderr
    count, reason = run.stdout.split("\n", 1)
    return reason.strip(), int(count)


INIT_NCCL = """
import kiln.distributed as dist
try:
    dist.init_process_group("nccl")
except RuntimeError as e:
    print(e)
print("initialized:", dist.is_initialized())
"""


def test_backend_strings():
    from kiln.distributed import _nccl

    assert _nccl.parse_backend("nccl") == "nccl"
    assert _nccl.parse_backend("cpu:mpi,cuda:nccl") == "nccl"
    assert _nccl.parse_backend("cuda:nccl,cpu:mpi") == "nccl"
    assert _nccl.parse_backend("mpi") is None and _nccl.parse_backend("cpu:mpi") is None
    assert _nccl.parse_backend(None) == "auto"
    # torch's CPU backend runs on MPI, so scripts written for it need no change
    assert _nccl.parse_backend("gloo") is None
    assert _nccl.parse_backend("cpu:gloo,cuda:nccl") == "nccl"
    for bad in ("ucc", "cuda:mpi", "nccl,mpi", "cuda:gloo"):
        with pytest.raises(ValueError, match="is not available"):
            _nccl.parse_backend(bad)


def test_nccl_without_a_device_or_libnccl_is_a_clear_error():
    reason, _ = probe()
    if not reason:
        pytest.skip("this machine has a CUDA device and libnccl")
    run = python(INIT_NCCL, KILN_CUDA_EMULATOR="0")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "kiln.distributed: init_process_group(backend='nccl'): " in out, out
    if "no CUDA device" in reason:
        assert "no CUDA device (" in out, out
    if "libnccl" in reason:
        assert "pip install nvidia-nccl-cu13" in out and "KILN_NCCL_LIB" in out, out
    assert "initialized: False" in out  # refused before MPI started


def test_kiln_nccl_lib_names_the_path_it_could_not_load():
    run = python(INIT_NCCL, KILN_NCCL_LIB="/nonexistent/libnccl.so.2")
    assert run.returncode == 0, run.stderr
    assert "libnccl could not be loaded" in run.stdout, run.stdout
    assert "/nonexistent/libnccl.so.2: " in run.stdout, run.stdout
    # an explicit path is not silently replaced by another library
    assert "tried:\n  /nonexistent/libnccl.so.2: " in run.stdout
    assert run.stdout.count("\n  ") == 1, run.stdout


def test_the_emulator_is_no_device_for_nccl():
    run = python(INIT_NCCL, KILN_CUDA_EMULATOR="1")
    assert run.returncode == 0, run.stderr
    assert "no CUDA device" in run.stdout and "KILN_CUDA_EMULATOR=1" in run.stdout, run.stdout


def data(r, shape=(5,)):
    return (np.arange(np.prod(shape)).reshape(shape) % 7 + r + 1).astype(np.float32)


REDUCE = {"SUM": np.sum, "MAX": np.max, "MIN": np.min, "PRODUCT": np.prod, "AVG": np.mean}


def check_collectives(got, r, n):
    """What worker_nccl.py's rank r of n saved, against NumPy."""
    for dt in ("float32", "bfloat16"):
        tol = {"bfloat16": 1e-2}.get(dt, 1e-6)
        for op, fn in REDUCE.items():
            want = fn(np.stack([data(q).astype(np.float64) for q in range(n)]), axis=0)
            np.testing.assert_allclose(got[f"all_reduce_{dt}_{op}"], want, rtol=tol,
                                       err_msg=f"rank {r} {dt} {op}")  # fmt: skip
        np.testing.assert_array_equal(got[f"broadcast_{dt}"], data(n - 1, (2, 3)))
        np.testing.assert_array_equal(
            got[f"all_gather_into_tensor_{dt}"], np.concatenate([data(q, (4,)) for q in range(n)])
        )
        total = sum(data(q, (n * 3,)) for q in range(n))
        np.testing.assert_allclose(got[f"reduce_scatter_{dt}"], total[r * 3 : (r + 1) * 3],
                                   rtol=tol)  # fmt: skip
        if r == 0:
            want = np.max([data(q) for q in range(n)], axis=0)
            np.testing.assert_array_equal(got[f"reduce_{dt}"], want)
    np.testing.assert_array_equal(got["all_reduce_int64_SUM"], sum(data(q) for q in range(n)))
    np.testing.assert_array_equal(got["all_reduce_bool_MAX"], [True, True, False])
    np.testing.assert_array_equal(got["all_reduce_cpu"], sum(data(q) for q in range(n)))
    if "all_gather" in got:
        np.testing.assert_array_equal(got["all_gather"], np.stack([data(q, (2, 3))
                                                                  for q in range(n)]))  # fmt: skip
    if n == 2:
        np.testing.assert_array_equal(got["ring"], data(1 - r))
    errors = list(got["errors"])
    expected = [
        "kiln.distributed.all_reduce: Tensors must be contiguous",
        f"kiln.distributed.all_gather: the output must hold world_size ({n}) times the input's 4",
        "kiln.distributed.all_gather: the NCCL backend takes CUDA tensors, got one on cpu",
        "kiln.distributed.all_reduce: the NCCL backend does not carry int16 tensors",
        "kiln.distributed.all_reduce: ReduceOp.AVG needs a floating tensor, got int64",
        "kiln.distributed.all_reduce: bool tensors reduce with MAX or MIN only, not SUM",
        f"kiln.distributed.send: dst {r} is not another rank of {n}",
        "kiln.distributed.all_reduce: the ranks passed tensors of different sizes (4 to 5 "
        if n > 1 else "",
    ]  # fmt: skip
    assert len(errors) == len(expected)
    for e, want in zip(errors, expected, strict=True):
        assert (want in e) if want else e == "", (want, e)


needs_fakes = pytest.mark.skipif(
    not (os.path.exists(FAKE_CUDA) and os.path.exists(FAKE_NCCL)),
    reason="the fake libcuda and libnccl are not built (scripts/build.sh builds them)",
)
FAKE_ENV = {"KILN_LIBCUDA": FAKE_CUDA, "KILN_NCCL_LIB": FAKE_NCCL, "KILN_CUDA_EMULATOR": "0"}


@needs_mpirun
@needs_fakes
def test_collectives_over_the_fake_libnccl(tmp_path):
    run = kilnrun(1, tmp_path, "fake", **FAKE_ENV)
    assert run.returncode == 0, run.stdout + run.stderr
    got = np.load(tmp_path / "rank0.npz")
    assert str(got["backend"]) == "nccl" and str(got["device"]) == "cuda:0"
    check_collectives(got, 0, 1)
    calls = str(got["calls"]).split()
    # the id travelled over MPI into ncclCommInitRank; every call on the default stream, with
    # NCCL's type and operation codes; the communicator destroyed with the group
    assert calls[:2] == ["get_unique_id", "init(1,0)"] and calls[-1] == "destroy"
    assert not any("stream" in c for c in calls)
    assert calls[2:7] == [f"all_reduce(5,7,{op})" for op in (0, 4, 2, 3, 1)]
    assert calls[7:12] == ["broadcast(6,7)", "all_gather(4,7)", "reduce_scatter(3,7,0)",
                           "reduce(5,7,2)", "all_reduce(5,9,0)"]  # fmt: skip
    assert "all_reduce(5,4,0)" in calls and "all_reduce(3,1,2)" in calls  # int64 SUM, bool MAX


@needs_mpirun
@needs_fakes
def test_an_asynchronous_nccl_error_aborts_the_communicator(tmp_path):
    run = kilnrun(1, tmp_path, "async_error", **FAKE_ENV)
    assert run.returncode == 0, run.stdout + run.stderr
    got = np.load(tmp_path / "async_error.npz")
    first, second = got["errors"]
    assert "all_reduce on rank 0 of 1 failed: NCCL reported remote process exited" in first
    assert "the NCCL communicator was aborted" in first
    assert "kiln.distributed.all_reduce: the NCCL communicator was aborted (NCCL reported" in second
    calls = str(got["calls"]).split()
    assert calls[-1] == "abort" and "destroy" not in calls


def gpu_or_skip(ranks=1):
    reason, count = probe()
    if reason:
        pytest.skip(f"the NCCL backend cannot run here: {reason}")
    if count < ranks:
        pytest.skip(f"{ranks} ranks need {ranks} GPUs (NCCL refuses two ranks on one device)")


@needs_mpirun
@pytest.mark.parametrize("n", [1, 2])
def test_collectives_on_gpus_equal_numpy(tmp_path, n):
    gpu_or_skip(n)
    run = kilnrun(n, tmp_path, "collectives", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    for r in range(n):
        got = np.load(tmp_path / f"rank{r}.npz")
        assert str(got["backend"]) == "nccl"
        check_collectives(got, r, n)


@needs_mpirun
def test_a_rank_missing_from_an_nccl_collective_times_out_and_aborts(tmp_path):
    gpu_or_skip(2)
    start = time.monotonic()
    run = kilnrun(2, tmp_path, "skip", timeout=120)
    assert run.returncode != 0
    assert "all_reduce on rank 0 of 2 did not complete within 5" in run.stdout, run.stdout
    assert "the NCCL communicator was aborted" in run.stdout, run.stdout
    assert time.monotonic() - start < 90


def test_libnccl_where_installed_exports_every_entry_point_kiln_calls():
    """Needs no device: loading resolves every NCCL function kiln calls and reads the version
    (run with the nvidia-nccl-cu13 wheel installed, or KILN_NCCL_LIB naming a libnccl)."""
    try:
        from kiln import _C

        path, version = _C._distributed.nccl_library()
    except RuntimeError as e:
        if "could not be loaded" in str(e):
            pytest.skip("no libnccl here (pip install nvidia-nccl-cu13)")
        raise
    assert os.path.basename(path).startswith("libnccl.so")
    major, minor, _ = (int(v) for v in version.split("."))
    assert (major, minor) >= (2, 10), version  # native AVG
