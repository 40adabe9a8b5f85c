"""kiln.distributed on Open MPI, run as real multi-process jobs through tools/kilnrun on this
machine (loopback): every collective against NumPy at 2 and 4 ranks, DistributedDataParallel
training against single-process training on the whole batch, and faults (a rank that skips a
collective, a rank that dies, mismatched tensors) ending every rank with a clear error within
the timeout instead of a hang."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
KILNRUN = os.path.join(ROOT, "tools", "kilnrun")
pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI not installed")


def kilnrun(n, script, *args, timeout=120):
    env = dict(os.environ, KILN_NUM_THREADS="1")
    return subprocess.run([KILNRUN, "--nproc-per-node", str(n), os.path.join(HERE, script),
                           *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env)  # fmt: skip


def data(r, dtype, shape=(5,)):
    return (np.arange(np.prod(shape)).reshape(shape) % 7 + r + 1).astype(dtype)


REDUCE = {"SUM": np.sum, "MAX": np.max, "MIN": np.min, "PRODUCT": np.prod, "AVG": np.mean}


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_equal_numpy(tmp_path, n):
    run = kilnrun(n, "worker_collectives.py", tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(n)]
    for r, got in enumerate(ranks):
        for dt in ("float32", "float64", "float16", "bfloat16", "int64"):
            np_dt = "float32" if dt == "bfloat16" else dt
            for op, fn in REDUCE.items():
                if op == "AVG" and dt == "int64":
                    continue
                want = fn(np.stack([data(q, np_dt).astype(np.float64) for q in range(n)]), axis=0)
                tol = {"float16": 2e-3, "bfloat16": 1e-2}.get(dt, 1e-6)
                np.testing.assert_allclose(got[f"all_reduce_{dt}_{op}"], want, rtol=tol,
                                           err_msg=f"rank {r} {dt} {op}")  # fmt: skip
        np.testing.assert_array_equal(got["broadcast"], data(n - 1, "float32", (2, 3)))
        np.testing.assert_array_equal(
            got["all_gather"], np.stack([data(q, "float32", (2, 3)) for q in range(n)])
        )
        np.testing.assert_array_equal(
            got["all_gather_into_tensor"],
            np.concatenate([data(q, "int64", (4,)) for q in range(n)]),
        )
        total = sum(data(q, "float32", (n * 3,)) for q in range(n))
        np.testing.assert_array_equal(got["reduce_scatter"], total[r * 3 : (r + 1) * 3])
        np.testing.assert_array_equal(got["ring"], data((r - 1) % n, "float32"))
    np.testing.assert_array_equal(
        ranks[0]["reduce"], np.max([data(q, "float64") for q in range(n)], axis=0)
    )
    # the async ones, all in flight at once, of every dtype
    for r, got in enumerate(ranks):
        for dt in ("float32", "float64", "float16", "bfloat16", "int64"):
            np_dt = "float32" if dt == "bfloat16" else dt
            np.testing.assert_array_equal(got[f"async_broadcast_{dt}"], data(0, np_dt, (2, 3)))
            np.testing.assert_array_equal(got[f"async_all_gather_into_tensor_{dt}"],
                                          np.concatenate([data(q, np_dt, (4,)) for q in range(n)]))
            total = sum(data(q, "float64", (n * 3,)) for q in range(n))
            np.testing.assert_array_equal(got[f"async_reduce_scatter_{dt}"],
                                          total[r * 3 : (r + 1) * 3])  # fmt: skip
            if r == n - 1:
                np.testing.assert_array_equal(got[f"async_reduce_{dt}"],
                                              sum(data(q, "float64") for q in range(n)))


def one_process_gpt_training():
    """What the DDP and FSDP workers train, in one process on the whole batch: the GPT from rank
    0's initial weights (which they broadcast), 10 SGD-momentum steps with gradient clipping.
    Returns (model, idx, tgt, losses)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from train_models import gpt_classes

    kiln.manual_seed(100)
    model = gpt_classes(kiln, vocab=32, block=8, n_embd=16, n_head=2, n_layer=2)()
    opt = kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    rng = np.random.default_rng(0)
    idx, tgt = rng.integers(0, 32, (4, 8)), rng.integers(0, 32, (4, 8))
    losses = []
    for _ in range(10):
        _, loss = model(kiln.tensor(idx), kiln.tensor(tgt))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        kiln.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return model, idx, tgt, losses


def test_ddp_trains_as_one_process_on_the_whole_batch(tmp_path):
    run = kilnrun(2, "worker_ddp.py", tmp_path, os.path.join(ROOT, "bench"))
    assert run.returncode == 0, run.stdout + run.stderr
    got = np.load(tmp_path / "ddp.npz")
    model, idx, tgt, losses = one_process_gpt_training()
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(got[f"w_{k}"], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    # no_sync accumulation, then one synchronized backward: the average of the ranks' sums
    mlp = kiln.nn.Sequential(kiln.nn.Linear(6, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 2))
    unused = kiln.nn.Linear(3, 3)
    kiln.manual_seed(7)
    for p in list(mlp.parameters()) + list(unused.parameters()):
        with kiln.no_grad():
            p.copy_(kiln.randn(p.shape) * 0.5)
    x = kiln.tensor(np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32))
    (mlp(x).pow(2).sum() / 2).backward()
    for i, p in enumerate(mlp.parameters()):
        np.testing.assert_allclose(got[f"mlp_grad{i}"], p.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[f"view_grad{i}"], p.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert got["view_storages"] == 1  # gradient_as_bucket_view: all in the one bucket's memory
    # kiln.compile of the DDP model (one compiled part, no eager node, on every rank): its
    # averaged gradients of the whole shard equal one process's of the whole batch
    for p in mlp.parameters():
        p.grad = None
    (mlp(x).pow(2).sum() / 2).backward()
    for i, p in enumerate(mlp.parameters()):
        np.testing.assert_allclose(got[f"compiled_grad{i}"], p.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_rank_that_skips_a_collective_times_out_with_the_name_of_it():
    start = time.monotonic()
    run = kilnrun(2, "worker_faults.py", "skip", timeout=60)
    assert run.returncode != 0
    assert "all_reduce on rank 0 of 2 did not complete within 3" in run.stdout, run.stdout
    assert time.monotonic() - start < 30


def test_a_rank_that_dies_ends_the_job_with_an_error():
    start = time.monotonic()
    run = kilnrun(2, "worker_faults.py", "die", timeout=60)
    assert run.returncode != 0
    text = run.stdout + run.stderr
    # mpirun names the process ([[job,1],rank]) and its status, and stops the others
    assert "exited with non-zero status" in text and ",1]" in text and "Exit code:    3" in text
    assert time.monotonic() - start < 30


def test_a_rank_that_raises_ends_the_job_at_once():
    # it exits without MPI_Finalize (which would wait for the others), so mpirun stops the job
    start = time.monotonic()
    run = kilnrun(2, "worker_faults.py", "raise", timeout=60)
    assert run.returncode != 0
    text = run.stdout + run.stderr
    # the rank and its error in one line, before the traceback (whose end mpirun may drop)
    assert "rank 1: ValueError: rank 1 broke" in text and "rank 0 finished" not in text
    assert time.monotonic() - start < 30


def test_mismatched_tensors_are_an_error_on_every_rank():
    run = kilnrun(2, "worker_faults.py", "mismatch", timeout=60)
    assert run.returncode != 0
    for r in (0, 1):
        assert f"rank {r} raised: kiln.distributed.all_reduce: the ranks passed tensors of " \
               "different sizes (4 to 5 elements" in run.stdout, run.stdout  # fmt: skip


def test_new_group_with_different_lists_or_a_missing_rank_is_an_error_not_a_hang():
    run = kilnrun(2, "worker_faults.py", "groups", timeout=60)
    assert run.returncode != 0
    for r in (0, 1):
        assert f"rank {r} raised: kiln.distributed.new_group: the ranks passed different rank " \
               "lists" in run.stdout, run.stdout  # fmt: skip
    start = time.monotonic()
    run = kilnrun(2, "worker_faults.py", "skip_group", timeout=60)
    assert run.returncode != 0
    assert "on rank 0 of 2 did not complete within 3" in run.stdout, run.stdout
    assert time.monotonic() - start < 30


def test_an_async_all_reduce_moves_on_while_the_rank_computes():
    run = kilnrun(2, "worker_progress.py", timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    for r in (0, 1):
        assert f"rank {r} completed while computing: True; sum {2.0 * (4 << 20)}" in run.stdout


def test_kilnrun_builds_the_mpirun_command(monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import kilnrun as kr

    a = kr.parse(["--nproc-per-node", "3", "train.py", "--lr", "0.1"])
    monkeypatch.delenv("KILN_NUM_THREADS", raising=False)
    cmd, env = kr.command(a, python="/py", cores=12)
    assert cmd[1:3] == ["-np", "3"] and "--tag-output" in cmd and "--oversubscribe" in cmd
    assert cmd[-5] == "/py" and cmd[-4].endswith("kilnrun_worker.py")
    assert cmd[-3:] == ["train.py", "--lr", "0.1"]
    assert env["KILN_NUM_THREADS"] == "4"  # the cores shared out among the local processes
    with pytest.raises(SystemExit, match="at least 1"):
        kr.command(kr.parse(["--nproc-per-node", "0", "x.py"]))
    import kilnrun_worker as kw

    mpi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
           "MASTER_PORT": "1234"}  # fmt: skip
    assert kw.torchrun_environment(mpi) == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"}  # fmt: skip


def test_collectives_need_an_initialized_group():
    import kiln.distributed as dist

    if dist.is_initialized():
        pytest.skip("a group is initialized in this process")
    with pytest.raises(ValueError, match="has not been initialized"):
        dist.get_rank()
    with pytest.raises(RuntimeError, match="has not been initialized"):
        dist.all_reduce(kiln.ones(2))
    with pytest.raises(ValueError, match="backend 'ucc' is not available"):
        dist.init_process_group("ucc")


@pytest.mark.parametrize("ranks", [1, 2])
def test_nanogpt_train_script_runs_with_the_import_swapped(tmp_path, ranks):
    script = os.path.join(HERE, "nanogpt_train.py")
    if ranks == 1:
        run = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    else:
        run = kilnrun(ranks, "nanogpt_train.py", tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    # mpirun tags each write with its rank; print() writes its text and its newline apart, so
    # the ranks' pieces interleave: each rank's output is its pieces joined in order
    pieces = re.split(r"\[1,(\d+)\]<std(?:out|err)>:", run.stdout)
    by_rank: dict = {}
    for rank, piece in zip(pieces[1::2], pieces[2::2], strict=True):
        by_rank[rank] = by_rank.get(rank, "") + piece
    text = pieces[0] + "".join(by_rank.values())
    losses = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("iter ")]  # fmt: skip
    assert len(losses) == 6 and all(np.isfinite(losses)), run.stdout
    assert text.count("checkpoint iter 3") == ranks


@pytest.mark.parametrize("mode, strategy", [("eager", "FULL_SHARD"), ("compiled", "FULL_SHARD"),
                                            ("eager", "SHARD_GRAD_OP")])  # fmt: skip
def test_fsdp_trains_as_one_process_on_the_whole_batch(tmp_path, mode, strategy):
    run = kilnrun(2, "worker_fsdp.py", tmp_path, os.path.join(ROOT, "bench"), mode, strategy)
    assert run.returncode == 0, run.stdout + run.stderr
    got = np.load(tmp_path / "fsdp.npz")
    model, idx, tgt, losses = one_process_gpt_training()
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    state = model.state_dict()
    assert sorted(k[2:] for k in got.files if k.startswith("w_")) == sorted(state)
    for k, v in state.items():
        np.testing.assert_allclose(got[f"w_{k}"], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    # each rank holds half of the parameters (padded), and the reloaded full state matches
    params = sum(p.numel() for p in model.parameters())
    assert params / 2 <= got["shard_numel"] <= params / 2 + 3
    assert got["same"] == 0.0
    # no_sync: each rank's two one-row losses accumulated, then averaged over the ranks
    model.zero_grad(set_to_none=True)
    sum(model(kiln.tensor(idx[i : i + 1]), kiln.tensor(tgt[i : i + 1]))[1]
        for i in range(4)).div(2).backward()  # fmt: skip
    norm = float(kiln.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
    np.testing.assert_allclose(got["grad_norm"], norm, rtol=1e-4)
    # two forwards, one backward: twice the gradient of one; a mid-step state dict is the same
    model.zero_grad(set_to_none=True)
    (model(kiln.tensor(idx), kiln.tensor(tgt))[1] * 2).backward()
    twice = float(kiln.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
    np.testing.assert_allclose(got["two_forwards"], twice, rtol=1e-4)
    assert bool(got["mid_same"])
    frozen, tied = got["refusals"]
    assert "require grad" in frozen and "tied weights" in tied
    # FULL_SHARD frees every unit's gathered parameters after its forward and after its
    # backward (reading a freed view is an error that says so); SHARD_GRAD_OP keeps them
    if strategy == "FULL_SHARD":
        assert got["held_between"] == 0 and got["held_after"] == 0
        assert "memory was released" in str(got["reading"])
    else:
        assert got["held_between"] == got["held_after"] == got["full_bytes"] > 0
        assert str(got["reading"]) == "read"
    # rank 0's rank0_only state dict is the full one; the local one is the three units' shards
    # (the root's under its own name) and the buffers, and reloads to the same model
    assert got["rank0_keys"] == len(state) and got["rank1_keys"] == 0
    shards = [k for k in got["local_keys"] if k.endswith("_flat_param")]
    assert shards == ["_flat_param", "transformer.h.0._flat_param", "transformer.h.1._flat_param"]
    assert got["local_same"] == 0.0
    assert "loads only at the world size it was saved at (this one: 2)" in str(got["wrong_world"])
    if mode == "compiled":  # each unit's forward and backward compiled, nothing on eager kernels
        assert got["parts"] >= 3 and got["backward_parts"] == got["parts"]
        assert got["eager_nodes"] == 0
    np.testing.assert_allclose(got["frozen_norm"], got["frozen_reference"], rtol=1e-5)


def test_compiled_ddp_splits_at_buckets_and_trains_as_one_process(tmp_path):
    run = kilnrun(2, "worker_ddp_compiled.py", tmp_path, os.path.join(ROOT, "bench"))
    assert run.returncode == 0, run.stdout + run.stderr
    got = np.load(tmp_path / "ddp_compiled.npz")
    # the graph is cut at gradient-bucket boundaries: several compiled parts, each with its own
    # compiled backward, and nothing on eager kernels
    assert got["splits"] >= 2 and got["parts"] == got["splits"] + 1
    assert got["backward_parts"] == got["parts"] and got["eager_nodes"] == 0
    # an all-reduce starts before the last compiled backward has run: communication overlaps
    events = str(got["events"])
    assert events.count("b") == got["parts"] and events.count("a") == got["buckets"]
    assert events.index("a") < events.rindex("b"), events
    model, idx, tgt, losses = one_process_gpt_training()
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(got[f"w_{k}"], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_new_group_collectives_run_on_their_ranks_only(tmp_path):
    run = kilnrun(4, "worker_groups.py", tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    for r in range(4):
        got = np.load(tmp_path / f"groups{r}.npz")
        mine = [0, 2] if r % 2 == 0 else [1, 3]
        assert list(got["rank"]) == [mine.index(r), -1, 2, -1, r]
        np.testing.assert_array_equal(got["all_reduce"], [sum(q + 1 for q in mine),
                                                          sum(10.0 * (q + 1) for q in mine)])
        np.testing.assert_array_equal(got["broadcast"], np.full(3, mine[-1]))
        np.testing.assert_array_equal(got["broadcast_group_src"], np.full(3, mine[0]))
        np.testing.assert_array_equal(got["all_gather"], [[q, q * q] for q in mine])
        total = sum(np.arange(4) + q for q in mine)
        k = mine.index(r)
        np.testing.assert_array_equal(got["reduce_scatter"], total[2 * k : 2 * k + 2])
        np.testing.assert_array_equal(got["recv"], [0, 0] if r == mine[0] else [mine[0], 7])
        np.testing.assert_array_equal(got["three"], [3.0] if r else [0.0])
        assert got["three_rank"] == (r - 1 if r else -1)
        np.testing.assert_array_equal(got["ddp_weight"], got["ddp_expected_weight"])
        np.testing.assert_allclose(got["ddp_grad"],
                                   [[np.mean([q + 1 for q in mine]), 2.0, 3.0]])  # fmt: skip
        # FSDP over the pair: 10 parameters, 5 per rank; d(sum(W 1 + b)) sums to 8 + 2
        assert got["fsdp_shard"] == 5 and got["fsdp_grad_sum"] == 10.0
        assert bool(got["fsdp_state_same"])
        np.testing.assert_allclose(got["ddp_cap0_grad"], got["ddp_grad"])
        bad_rank, twice, outside, destroyed = (str(e) for e in got["errors"])
        assert "rank 4 is not a rank of the 4" in bad_rank and "listed twice" in twice
        assert "is not part of the group" in outside
        assert "the group of ranks [1, 2, 3] was destroyed" in destroyed
        assert bool(got["world_alive"]) and got["recv_off_group"] == -1


@pytest.mark.parametrize("wrapper, mode", [("ddp", "eager"), ("ddp", "compiled"),
                                           ("fsdp", "eager")])  # fmt: skip
def test_a_conv_net_with_sync_batchnorm_trains_as_one_process(tmp_path, wrapper, mode):
    """SyncBatchNorm's statistics and gradients span the ranks, so DDP and FSDP on half-batches
    train as one process with BatchNorm on the whole batch (weights and running statistics)."""
    run = kilnrun(2, "worker_conv.py", tmp_path, os.path.join(ROOT, "bench"), wrapper, mode)
    assert run.returncode == 0, run.stdout + run.stderr
    got = np.load(tmp_path / "conv.npz")
    if mode == "compiled":
        # the convolutions, pools, head and the in-place ReLU after SyncBatchNorm compile with
        # their backwards; only SyncBatchNorm's collective runs eagerly
        assert got["parts"] >= 2 and got["backward_parts"] == got["parts"]
        eager = {str(t) for t in got["eager_targets"]}
        assert eager == {"kiln.autograd.function.Function.apply", "operator.getitem"}
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from train_models import conv_net

    kiln.manual_seed(200)
    model = conv_net(kiln)
    opt = kiln.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 3, 12, 12)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    losses = []
    for _ in range(10):
        loss = kiln.nn.functional.cross_entropy(model(kiln.tensor(x)), kiln.tensor(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-4)
    state = model.state_dict()
    assert sorted(k[2:] for k in got.files if k.startswith("w_")) == sorted(state)
    for k, v in state.items():
        np.testing.assert_allclose(got[f"w_{k}"], v.numpy(), rtol=1e-3, atol=1e-5, err_msg=k)


def test_sync_batchnorm_over_ranks_equals_batchnorm_of_the_whole_batch(tmp_path):
    torch = pytest.importorskip("torch")
    run = kilnrun(2, "worker_syncbn.py", tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = [np.load(tmp_path / f"syncbn{r}.npz") for r in range(2)]
    rng = np.random.default_rng(5)
    x = (30.0 + 0.1 * rng.standard_normal((8, 3, 5, 5))).astype(np.float32)
    dy = rng.standard_normal((8, 3, 5, 5)).astype(np.float32)
    for dtype, tol in (("float32", 1e-4), ("float16", 2e-2), ("bfloat16", 5e-2)):
        # the reference sees the same rounded inputs, computed in float32
        xr = torch.tensor(x).to(getattr(torch, dtype)).float()
        for affine in (True, False):
            for momentum in (0.1, None):
                key = f"{dtype}_{affine}_{momentum}"
                bn = torch.nn.BatchNorm2d(3, affine=affine, momentum=momentum)
                if affine:
                    with torch.no_grad():
                        bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
                        bn.bias.copy_(torch.tensor([0.0, -1.0, 3.0]))
                xt = xr.clone().requires_grad_(True)
                y = bn(xt)
                y.backward(torch.tensor(dy).to(getattr(torch, dtype)).float())
                for r in range(2):
                    rows = slice(4 * r, 4 * r + 4)
                    np.testing.assert_allclose(got[r][f"y_{key}"], y.detach()[rows].numpy(),
                                               rtol=tol, atol=tol, err_msg=key)  # fmt: skip
                    # each rank's loss is half the batch's; DDP's average of the ranks' parameter
                    # gradients is the whole batch's
                    np.testing.assert_allclose(got[r][f"dx_{key}"], xt.grad[rows].numpy(),
                                               rtol=tol, atol=tol * 20, err_msg=key)  # fmt: skip
                    np.testing.assert_allclose(got[r][f"mean_{key}"], bn.running_mean.numpy(),
                                               rtol=1e-4, err_msg=key)  # fmt: skip
                    np.testing.assert_allclose(got[r][f"var_{key}"], bn.running_var.numpy(),
                                               rtol=tol, atol=1e-5, err_msg=key)  # fmt: skip
                if affine:
                    for name, ref in (("dw", bn.weight.grad), ("db", bn.bias.grad)):
                        both = got[0][f"{name}_{key}"] + got[1][f"{name}_{key}"]
                        np.testing.assert_allclose(both, ref.numpy(), rtol=tol, atol=tol * 10,
                                                   err_msg=f"{name} {key}")  # fmt: skip


def test_the_ddp_tutorial_runs_with_multiprocessing_spawn(tmp_path):
    """torch.multiprocessing.spawn + init_process_group("gloo", rank=r, world_size=n): the
    processes form one MPI job, and the DDP step averages the ranks' gradients."""
    script = os.path.join(HERE, "ddp_tutorial_spawn.py")
    run = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert all(f"Finished running basic DDP example on rank {r}." in run.stdout for r in (0, 1))
    states = [kiln.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    sys.path.insert(0, HERE)
    from ddp_tutorial_spawn import ToyModel

    kiln.manual_seed(0)
    model = ToyModel()
    opt = kiln.optim.SGD(model.parameters(), lr=0.001)
    # the average of the ranks' losses: inputs of ones times 1 and times 2
    sum(kiln.nn.MSELoss()(model(kiln.ones(20, 10) * (r + 1)), kiln.zeros(20, 5))
        for r in (0, 1)).div(2).backward()  # fmt: skip
    opt.step()
    for k, v in model.state_dict().items():
        for state in states:
            np.testing.assert_allclose(state[k].numpy(), v.detach().numpy(), rtol=1e-5,
                                       atol=1e-7, err_msg=k)  # fmt: skip
    # a process that raises ends the job, and spawn raises with its output
    run = subprocess.run([sys.executable, script, str(tmp_path), "fail"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode != 0
    assert "ProcessRaisedException" in run.stderr and "rank 1 failed on purpose" in run.stderr


def test_spawn_refuses_what_it_cannot_send():
    with pytest.raises(ValueError, match="must be picklable"):
        kiln.multiprocessing.spawn(lambda rank: None, nprocs=2)
    with pytest.raises(ValueError, match="nprocs must be at least 1"):
        kiln.multiprocessing.spawn(print, nprocs=0)
    assert kiln.multiprocessing.Queue is not None and kiln.multiprocessing.get_context
