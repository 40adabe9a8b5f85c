"""kiln.save / kiln.load in torch's checkpoint format: round trips of models and optimizer
states, torch.load of kiln's files and kiln.load of torch's, tied weights, atomic writes and
the errors for corrupt or untrusted files."""

import io
import os
import pickle
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from train_models import gpt_classes  # noqa: E402

DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
          "uint8", "bool"]  # fmt: skip


def values(name):
    a = np.arange(12).reshape(3, 4) % 5
    return a.astype(bool) if name == "bool" else a


def to_numpy(t):
    t = t.detach()
    return (t.float() if "bfloat16" in str(t.dtype) else t).numpy()


def test_every_dtype_and_layout_round_trips_and_torch_reads_it(tmp_path):
    obj = {f"t_{d}": kiln.tensor(values(d)).to(getattr(kiln, d)) for d in DTYPES}
    obj["transposed"] = kiln.arange(12.0).reshape(3, 4).t()
    obj["scalar"], obj["empty"] = kiln.tensor(2.5), kiln.zeros(0, 3)
    obj["meta"] = {"step": 7, "lr": 1e-3, "name": "run", "sizes": [1, (2, 3)]}
    path = tmp_path / "ckpt.pt"
    kiln.save(obj, path)
    for back in (kiln.load(path), torch.load(path, weights_only=True)):
        assert back["meta"] == obj["meta"]
        for k, v in obj.items():
            if k == "meta":
                continue
            assert str(back[k].dtype).split(".")[-1] == str(v.dtype).split(".")[-1], k
            assert tuple(back[k].shape) == tuple(v.shape)
            np.testing.assert_array_equal(to_numpy(back[k]), to_numpy(v), err_msg=k)


def test_a_gpt_and_its_optimizer_resume_from_torch_checkpoint(tmp_path):
    """torch.save of a torch model and AdamW state, kiln.load into the same kiln model: the
    next step's loss equals torch's."""
    idx = torch.randint(0, 48, (2, 8), generator=torch.Generator().manual_seed(0))
    losses, models = {}, {}
    for m in (torch, kiln):
        m.manual_seed(0)
        models[m.__name__] = (gpt_classes(m)(), m)
    tmodel = models["torch"][0]
    topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-2)
    _, loss = tmodel(idx, idx)
    loss.backward()
    topt.step()
    torch.save({"model": tmodel.state_dict(), "optimizer": topt.state_dict(), "iter": 1},
               tmp_path / "torch.pt")  # fmt: skip
    ckpt = kiln.load(tmp_path / "torch.pt")
    kmodel = models["kiln"][0]
    kmodel.load_state_dict(ckpt["model"])
    kopt = kiln.optim.AdamW(kmodel.parameters(), lr=1e-2)
    kopt.load_state_dict(ckpt["optimizer"])
    assert ckpt["iter"] == 1
    for model, opt, m, x in (
        (tmodel, topt, torch, idx),
        (kmodel, kopt, kiln, kiln.tensor(idx.numpy())),
    ):
        opt.zero_grad()
        _, loss = model(x, x)
        loss.backward()
        opt.step()
        losses[m.__name__] = model(x, x)[1].item()
    np.testing.assert_allclose(losses["kiln"], losses["torch"], rtol=1e-5)


def test_kiln_checkpoint_loads_into_torch_and_keeps_tied_weights(tmp_path):
    kiln.manual_seed(0)
    model = gpt_classes(kiln)()
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-2)
    x = kiln.randint(0, 48, (2, 8))
    model(x, x)[1].backward()
    opt.step()
    kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "k.pt")
    back = kiln.load(tmp_path / "k.pt")["model"]
    # the tied embedding and head are one storage in the file and one after loading
    assert back["lm_head.weight"].data_ptr() == back["transformer.wte.weight"].data_ptr()
    tmodel = gpt_classes(torch)()
    tmodel.load_state_dict(torch.load(tmp_path / "k.pt", weights_only=True)["model"])
    tx = torch.tensor(x.numpy())
    np.testing.assert_allclose(tmodel(tx, tx)[1].item(), model(x, x)[1].item(), rtol=1e-5)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-2)
    topt.load_state_dict(torch.load(tmp_path / "k.pt", weights_only=True)["optimizer"])


def test_parameters_and_file_objects():
    p = kiln.nn.Parameter(kiln.ones(2, 2))
    buf = io.BytesIO()
    kiln.save({"p": p, "same": p}, buf)
    back = kiln.load(io.BytesIO(buf.getvalue()))
    assert isinstance(back["p"], kiln.nn.Parameter) and back["p"].requires_grad
    assert back["same"] is back["p"]  # one object in, one object out
    tp = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)["p"]
    assert isinstance(tp, torch.nn.Parameter)


class Custom:
    def __init__(self):
        self.value = 3


def test_weights_only_refuses_other_globals_and_corrupt_files_are_errors(tmp_path):
    path = tmp_path / "c.pt"
    kiln.save({"obj": Custom()}, path)
    with pytest.raises(RuntimeError, match="weights_only=True refuses the global"):
        kiln.load(path)
    assert kiln.load(path, weights_only=False)["obj"].value == 3
    data = path.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError, match="cut.pt.*not a checkpoint"):
        kiln.load(tmp_path / "cut.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(RuntimeError, match="not a checkpoint"):
        kiln.load(tmp_path / "text.pt")


class Unpicklable:
    def __reduce__(self):
        raise pickle.PicklingError("no")


def test_a_failed_save_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "ckpt.pt"
    kiln.save({"w": kiln.ones(3)}, path)
    with pytest.raises(pickle.PicklingError):
        kiln.save({"w": kiln.zeros(3), "bad": Unpicklable()}, path)
    np.testing.assert_array_equal(kiln.load(path)["w"].numpy(), np.ones(3))
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt"]


def test_many_non_contiguous_tensors_keep_their_own_values():
    """Each transposed tensor is copied to a contiguous buffer to be written; a freed buffer's
    address must not make the next tensor look like one already written."""
    tensors = [(kiln.arange(4096.0) * i).reshape(64, 64).t() for i in range(20)]
    assert not tensors[0].is_contiguous()
    buf = io.BytesIO()
    kiln.save(tensors, buf)
    for i, t in enumerate(kiln.load(io.BytesIO(buf.getvalue()))):
        np.testing.assert_array_equal(t.numpy(), np.arange(4096.0).reshape(64, 64).T * i)


def test_checkpoints_with_schedulers_dtypes_and_devices_load(tmp_path):
    """MultiStepLR's state holds a collections.Counter; AMP configs hold dtypes and devices:
    kiln.load reads them from torch's files and from its own, weights_only included."""
    import torch

    opt = kiln.optim.SGD([kiln.nn.Parameter(kiln.zeros(1))], lr=0.1)
    sched = kiln.optim.lr_scheduler.MultiStepLR(opt, [30, 80])
    path = tmp_path / "ckpt.pt"
    kiln.save({"sched": sched.state_dict(), "dt": kiln.bfloat16, "dev": kiln.device("cpu")}, path)
    back = kiln.load(path)
    assert back["sched"]["milestones"] == sched.state_dict()["milestones"]
    assert back["dt"] == kiln.bfloat16 and back["dev"] == kiln.device("cpu")
    torch.save({"dev": torch.device("cpu"), "dtype": torch.float32}, path)
    assert kiln.load(path) == {"dev": kiln.device("cpu"), "dtype": kiln.float32}


def test_map_location_as_torch_takes_it(tmp_path):
    """A dict from saved location to device (the DDP tutorial's {'cuda:0': 'cuda:<rank>'}: CPU
    tensors stay where they were saved), or fn(storage, location); tests/python/cuda has the
    moves to a device."""
    path = tmp_path / "m.pt"
    base = kiln.arange(6.0).reshape(2, 3)
    kiln.save({"a": base, "col": base[:, 1]}, path)
    assert kiln.load(path, map_location={"cuda:0": "cuda:1"})["a"].device.type == "cpu"
    seen = []
    got = kiln.load(path, map_location=lambda s, loc: seen.append(loc) or s * 2)
    assert set(seen) == {"cpu"} and got["a"].tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    assert got["col"].tolist() == [2.0, 8.0]
