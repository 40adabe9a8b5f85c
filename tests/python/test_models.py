"""End-to-end: the same model source runs with torch and with kiln; with torch's state_dict
loaded into the kiln model the outputs, losses and BatchNorm running statistics agree."""

import importlib.util
import pathlib
import sys

import pytest
import torch
from conftest import assert_close, make, to_kiln
from models import convnet, gpt
from models.helpers import copy_state

import kiln
import kiln.nn as knn
import kiln.nn.functional as kF

MODELS_DIR = pathlib.Path(__file__).parent / "models"
TOL = {"atol": 1e-4, "rtol": 1e-4}


def build_pair(builder, **config):
    torch.manual_seed(0)
    tm = builder(torch, torch.nn, torch.nn.functional)(**config)
    kiln.manual_seed(0)
    km = builder(kiln, knn, kF)(**config)
    assert repr(km) == repr(tm)
    assert [(n, tuple(p.shape)) for n, p in km.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in tm.named_parameters()
    ]
    assert list(km.state_dict()) == list(tm.state_dict())
    assert copy_state(km, tm).missing_keys == []
    return tm, km


def tokens(shape, vocab, seed=0):
    t = torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))
    return t, to_kiln(t)


# ------------------------------------------------------------------------------------------- GPT


@pytest.mark.parametrize("use_mha", [False, True], ids=["sdpa", "mha"])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_gpt_matches_torch(use_mha, mode):
    tm, km = build_pair(gpt.build, use_mha=use_mha)
    getattr(tm, mode)()
    getattr(km, mode)()  # dropout is 0.0, so train mode is deterministic too
    idx_t, idx_k = tokens((2, 12), 50)
    tgt_t, tgt_k = tokens((2, 12), 50, seed=1)
    with torch.no_grad():
        t_logits, t_loss = tm(idx_t, tgt_t)
    k_logits, k_loss = km(idx_k, tgt_k)
    assert_close(k_logits, t_logits, **TOL)
    assert_close(k_loss, t_loss, **TOL)
    k_logits, k_none = km(idx_k)
    assert k_none is None and tuple(k_logits.shape) == (2, 12, 50)


def test_gpt_weight_tying_survives_loading_and_dtype_change():
    tm, km = build_pair(gpt.build)
    assert km.head.weight is km.tok_emb.weight
    km.double()
    tm.double()
    assert km.head.weight is km.tok_emb.weight and km.head.weight.dtype == kiln.float64
    idx_t, idx_k = tokens((1, 8), 50)
    with torch.no_grad():
        expected, _ = tm(idx_t)
    got, _ = km(idx_k)
    assert_close(got, expected, atol=1e-10, rtol=1e-10)


def test_gpt_rejects_long_sequences():
    _, km = build_pair(gpt.build, block_size=4)
    with pytest.raises(ValueError, match="exceeds block size 4"):
        km(tokens((1, 5), 50)[1])


# --------------------------------------------------------------------------------------- ConvNet


def test_convnet_train_steps_update_running_stats_like_torch():
    tm, km = build_pair(convnet.build)
    tm.train()
    km.train()
    for step in range(3):
        t, k = make((4, 3, 16, 16), "float32", seed=step)
        with torch.no_grad():
            expected = tm(t)
        assert_close(km(k), expected, **TOL)
        for (kname, kb), (tname, tb) in zip(km.named_buffers(), tm.named_buffers(), strict=True):
            assert kname == tname
            assert_close(kb, tb, atol=1e-5, rtol=1e-5)
    assert int(km.features[1].num_batches_tracked) == 3


def test_convnet_eval_and_loss():
    tm, km = build_pair(convnet.build, num_classes=5)
    tm.eval()
    km.eval()
    t, k = make((3, 3, 12, 12), "float32")
    target_t, target_k = tokens((3,), 5)
    with torch.no_grad():
        t_out = tm(t)
        t_loss = torch.nn.functional.nll_loss(t_out, target_t)
        t_ce = torch.nn.functional.cross_entropy(t_out, target_t)
    k_out = km(k)
    assert_close(k_out, t_out, **TOL)
    assert_close(kF.nll_loss(k_out, target_k), t_loss, **TOL)
    assert_close(knn.CrossEntropyLoss()(k_out, target_k), t_ce, **TOL)
    # Non-contiguous (channels-last) input gives the same result.
    t2, k2 = make((3, 12, 12, 3), "float32", seed=3)
    with torch.no_grad():
        expected = tm(t2.permute(0, 3, 1, 2))
    assert_close(km(k2.permute(0, 3, 1, 2)), expected, **TOL)


def test_convnet_double():
    tm, km = build_pair(convnet.build)
    tm.eval().double()
    km.eval().double()
    t, k = make((2, 3, 8, 8), "float64")
    with torch.no_grad():
        expected = tm(t)
    assert_close(km(k), expected, atol=1e-10, rtol=1e-10)


# ----------------------------------------------------- a model file importing kiln as torch


def load_module(name, source):
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, str(MODELS_DIR / "kiln_encoder.py"), "exec"), module.__dict__)  # noqa: S102
    sys.modules.pop(name, None)
    return module


def test_model_file_written_for_torch_runs_with_only_imports_changed():
    source = (MODELS_DIR / "kiln_encoder.py").read_text()
    kiln_imports = [
        "import kiln as torch",
        "import kiln.nn as nn",
        "import kiln.nn.functional as F",
    ]
    assert all(line in source.splitlines() for line in kiln_imports)
    torch_source = (
        source.replace("import kiln as torch", "import torch")
        .replace("import kiln.nn.functional as F", "import torch.nn.functional as F")
        .replace("import kiln.nn as nn", "import torch.nn as nn")
    )
    assert "kiln" not in torch_source.split('"""')[-1]  # only the docstring mentions kiln
    k_mod = load_module("kiln_encoder_k", source)
    t_mod = load_module("kiln_encoder_t", torch_source)
    torch.manual_seed(0)
    tm = t_mod.EncoderClassifier().eval()
    km = k_mod.EncoderClassifier().eval()
    assert repr(km) == repr(tm)
    with torch.no_grad():
        tm.pos.normal_()
    copy_state(km, tm)
    tok_t, _ = tokens((3, 10), 40)
    tok_t[0, 7:] = 0  # padding
    tok_t[1, 9:] = 0
    with torch.no_grad():
        t_probs, t_weights = tm(tok_t)
    k_probs, k_weights = km(to_kiln(tok_t))
    assert_close(k_probs, t_probs, **TOL)
    assert_close(k_weights, t_weights, **TOL)
