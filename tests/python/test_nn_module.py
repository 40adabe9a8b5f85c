"""kiln.nn.Module mechanics compared with torch.nn.Module on the same architectures:
registration, naming, state_dict / load_state_dict, train/eval, repr, hooks, containers, to()."""

import re
from collections import OrderedDict

import pytest
import torch
from conftest import assert_close, to_kiln

import kiln
import kiln.nn as knn


def make_net(fw, nn):
    """A small model touching every registration path; `fw` is torch or kiln."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
            self.head = nn.Sequential(OrderedDict(fc=nn.Linear(4, 2), act=nn.ReLU()))
            self.scale = nn.Parameter(fw.ones(2))
            self.register_buffer("offset", fw.zeros(2))
            self.register_buffer("cache", fw.zeros(3), persistent=False)

        def forward(self, x):
            x = self.bn(self.conv(x)).mean((2, 3))
            for blk in self.blocks:
                x = blk(x)
            return self.head(x) * self.scale + self.offset

    return Net()


def both(builder):
    torch.manual_seed(0)
    tm = builder(torch, torch.nn)
    km = builder(kiln, knn)
    return tm, km


def load_from_torch(km, tm):
    return km.load_state_dict({k: to_kiln(v) for k, v in tm.state_dict().items()})


def shapes(named):
    return [(n, tuple(t.shape)) for n, t in named]


# ------------------------------------------------------------------------------------- Parameter


def test_parameter_aliases_data_and_requires_grad():
    t = kiln.zeros((2, 3))
    p = knn.Parameter(t)
    assert isinstance(p, kiln.Tensor) and isinstance(p, knn.Parameter)
    assert p.requires_grad and not t.requires_grad
    assert p.data_ptr() == t.data_ptr() and tuple(p.shape) == (2, 3)
    t.fill_(5.0)
    assert p.detach().tolist() == [[5.0] * 3] * 2
    assert not knn.Parameter(t, requires_grad=False).requires_grad
    empty = knn.Parameter()
    assert empty.numel() == 0 and empty.dtype == kiln.float32


def test_parameter_repr_and_errors():
    p = knn.Parameter(kiln.ones(2))
    assert repr(p).startswith("Parameter containing:\ntensor(")
    assert "requires_grad=True" in repr(p)
    with pytest.raises(RuntimeError, match="floating point"):
        knn.Parameter(kiln.zeros(2, dtype=kiln.int64))
    with pytest.raises(TypeError, match="expected a kiln.Tensor"):
        knn.Parameter([1.0, 2.0])


def test_buffer_assignment_registers_buffer():
    m = knn.Module()
    m.a = knn.Buffer(kiln.ones(2))
    m.b = knn.Buffer(kiln.ones(3), persistent=False)
    assert [n for n, _ in m.named_buffers()] == ["a", "b"]
    assert list(m.state_dict()) == ["a"]
    m.a = kiln.zeros(2)  # a plain tensor assigned to a buffer name stays a buffer
    assert m.a.tolist() == [0.0, 0.0] and "a" in m._buffers


# ---------------------------------------------------------------------------------- registration


def test_named_parameters_buffers_modules_match_torch():
    tm, km = both(make_net)
    assert shapes(km.named_parameters()) == shapes(tm.named_parameters())
    assert shapes(km.named_buffers()) == shapes(tm.named_buffers())
    assert [n for n, _ in km.named_modules()] == [n for n, _ in tm.named_modules()]
    assert [n for n, _ in km.named_children()] == [n for n, _ in tm.named_children()]
    assert shapes(km.named_parameters(prefix="net", recurse=False)) == shapes(
        tm.named_parameters(prefix="net", recurse=False)
    )
    assert len(list(km.parameters())) == len(list(tm.parameters()))
    assert len(list(km.buffers(recurse=False))) == len(list(tm.buffers(recurse=False)))
    assert len(list(km.modules())) == len(list(tm.modules()))
    assert [type(c).__name__ for c in km.children()] == [type(c).__name__ for c in tm.children()]


def test_shared_parameters_and_modules_are_yielded_once():
    def tied(fw, nn):
        m = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5, bias=False))
        m[1].weight = m[0].weight
        m.add_module("again", m[0])
        return m

    tm, km = both(tied)
    assert shapes(km.named_parameters()) == shapes(tm.named_parameters())
    assert [n for n, _ in km.named_modules()] == [n for n, _ in tm.named_modules()]
    assert [n for n, _ in km.named_modules(remove_duplicate=False)] == [
        n for n, _ in tm.named_modules(remove_duplicate=False)
    ]
    assert list(km.state_dict()) == list(tm.state_dict())


def test_register_errors_match_torch():
    m = knn.Linear(2, 2)
    with pytest.raises(TypeError, match="cannot assign .* as parameter 'weight'"):
        m.weight = kiln.zeros((2, 2))
    with pytest.raises(TypeError, match="to parameter 'w'"):
        m.register_parameter("w", kiln.zeros(2))
    with pytest.raises(KeyError, match="name can.*t contain"):
        m.register_parameter("a.b", None)
    with pytest.raises(KeyError, match="empty string"):
        m.register_buffer("", None)
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        m.register_buffer("forward", kiln.zeros(1))
    with pytest.raises(TypeError, match="buffer name should be a string"):
        m.register_buffer(3, None)
    with pytest.raises(TypeError, match="object to buffer 'x'"):
        m.register_buffer("x", [1, 2])
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("sub", 3)
    with pytest.raises(KeyError, match="module name can.*t contain"):
        m.add_module("a.b", knn.ReLU())
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'nope'"):
        _ = m.nope


def test_assign_before_init_raises():
    class Bad(knn.Module):
        def __init__(self):
            self.w = knn.Parameter(kiln.zeros(1))

    with pytest.raises(AttributeError, match=r"before Module.__init__\(\) call"):
        Bad()


def test_reassignment_moves_between_tables_and_delattr():
    m = knn.Module()
    m.x = knn.Parameter(kiln.zeros(1))
    assert "x" in m._parameters
    m.x = None  # allowed: keeps the name registered with no value
    assert m._parameters["x"] is None and "x" not in dict(m.named_parameters())
    del m.x
    m.x = knn.ReLU()
    assert "x" in m._modules and "x" not in m._parameters
    m.register_buffer("y", kiln.ones(1))
    del m.y
    assert "y" not in m._buffers
    m.plain = 3
    assert m.plain == 3 and "plain" in m.__dict__
    del m.plain
    with pytest.raises(AttributeError):
        _ = m.plain


def test_dir_lists_members():
    m = knn.Linear(2, 3)
    names = dir(m)
    assert "weight" in names and "bias" in names and "forward" in names
    assert "0" not in dir(knn.Sequential(knn.ReLU()))  # names that are not identifiers are hidden


def test_get_submodule_parameter_buffer():
    tm, km = both(make_net)
    assert isinstance(km.get_submodule("head.fc"), knn.Linear)
    assert km.get_submodule("") is km
    assert km.get_parameter("blocks.1.bias") is km.blocks[1].bias
    assert km.get_buffer("bn.running_var") is km.bn.running_var
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        km.get_submodule("head.nope")
    with pytest.raises(AttributeError, match="is not an nn.Module"):
        km.get_submodule("conv.weight")
    with pytest.raises(AttributeError, match="is not an nn.Parameter"):
        km.get_parameter("bn.running_mean")


def test_forward_missing_raises():
    with pytest.raises(
        NotImplementedError, match=r'Module \[Module\] is missing the required "forward"'
    ):
        knn.Module()(1)


# ------------------------------------------------------------------------------------ state_dict


def test_state_dict_keys_match_torch_and_alias_parameters():
    tm, km = both(make_net)
    sd = km.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == list(tm.state_dict())
    assert "cache" not in sd  # non-persistent
    assert sd["conv.weight"].data_ptr() == km.conv.weight.data_ptr()
    assert not sd["conv.weight"].requires_grad and not isinstance(sd["conv.weight"], knn.Parameter)
    kept = km.state_dict(keep_vars=True)
    assert kept["conv.weight"] is km.conv.weight
    assert list(km.state_dict(prefix="model.")) == ["model." + k for k in tm.state_dict()]


def test_load_state_dict_copies_values_in_place():
    tm, km = both(make_net)
    ptr = km.conv.weight.data_ptr()
    result = load_from_torch(km, tm)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == repr(tm.load_state_dict(tm.state_dict()))
    assert km.conv.weight.data_ptr() == ptr and isinstance(km.conv.weight, knn.Parameter)
    for (kname, kv), (tname, tv) in zip(
        km.state_dict().items(), tm.state_dict().items(), strict=True
    ):
        assert kname == tname
        assert_close(kv, tv)


def test_loaded_model_forward_matches_torch():
    tm, km = both(make_net)
    with torch.no_grad():
        for p in tm.parameters():
            p.uniform_(-1.0, 1.0)
        tm.offset.uniform_(-1.0, 1.0)
    load_from_torch(km, tm)
    tm.eval()
    km.eval()
    x = torch.rand(2, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = tm(x)
    assert_close(km(to_kiln(x)), expected, atol=1e-5, rtol=1e-5)


def test_load_state_dict_strict_errors_match_torch():
    tm, km = both(make_net)
    sd_t = tm.state_dict()
    del sd_t["head.fc.bias"]
    sd_t["extra.weight"] = torch.zeros(1)
    sd_k = {k: to_kiln(v) for k, v in sd_t.items()}
    with pytest.raises(RuntimeError) as kerr:
        km.load_state_dict(sd_k)
    with pytest.raises(RuntimeError) as terr:
        tm.load_state_dict(sd_t)
    assert str(kerr.value) == str(terr.value)
    assert 'Missing key(s) in state_dict: "head.fc.bias"' in str(kerr.value)
    kres, tres = km.load_state_dict(sd_k, strict=False), tm.load_state_dict(sd_t, strict=False)
    assert kres.missing_keys == tres.missing_keys
    assert kres.unexpected_keys == tres.unexpected_keys


def test_load_state_dict_size_mismatch_raises_even_when_not_strict():
    tm, km = both(make_net)
    sd_t = tm.state_dict()
    sd_t["blocks.0.weight"] = torch.zeros(3, 4)
    sd_k = {k: to_kiln(v) for k, v in sd_t.items()}
    with pytest.raises(RuntimeError) as kerr:
        km.load_state_dict(sd_k, strict=False)
    with pytest.raises(RuntimeError) as terr:
        tm.load_state_dict(sd_t, strict=False)
    assert str(kerr.value) == str(terr.value).replace("torch.Size", "kiln.Size")
    assert "size mismatch for blocks.0.weight" in str(kerr.value)


def test_load_state_dict_rejects_non_tensors_and_non_mappings():
    km = knn.Linear(2, 2)
    with pytest.raises(RuntimeError, match='While copying the parameter named "weight"'):
        km.load_state_dict({"weight": [[1.0, 2.0], [3.0, 4.0]], "bias": kiln.zeros(2)})
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        km.load_state_dict([("weight", kiln.zeros((2, 2)))])


def test_load_state_dict_casts_dtype_and_assign():
    km = knn.Linear(2, 2)
    sd = {
        "weight": kiln.ones((2, 2), dtype=kiln.float64),
        "bias": kiln.zeros(2, dtype=kiln.float64),
    }
    km.load_state_dict(sd)
    assert km.weight.dtype == kiln.float32 and km.weight.detach().tolist() == [
        [1.0, 1.0],
        [1.0, 1.0],
    ]
    km.load_state_dict(sd, assign=True)
    assert km.weight.dtype == kiln.float64 and isinstance(km.weight, knn.Parameter)
    assert km.weight.data_ptr() == sd["weight"].data_ptr()


def test_batchnorm_state_without_num_batches_tracked_loads():
    km = knn.BatchNorm1d(3)
    sd = {k: v for k, v in km.state_dict().items() if k != "num_batches_tracked"}
    assert km.load_state_dict(sd).missing_keys == []


# ------------------------------------------------------------------------------- train, to, apply


def test_train_eval_propagate():
    tm, km = both(make_net)
    assert km.training and all(m.training for m in km.modules())
    assert km.eval() is km
    assert not any(m.training for m in km.modules())
    km.head.train()
    assert km.head.fc.training and not km.bn.training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        km.train("yes")


@pytest.mark.parametrize(
    "method,dtype",
    [("double", "float64"), ("half", "float16"), ("bfloat16", "bfloat16"), ("float", "float32")],
)
def test_dtype_conversion_methods(method, dtype):
    _, km = both(make_net)
    assert getattr(km, method)() is km
    assert all(p.dtype.name == dtype for p in km.parameters())
    assert all(isinstance(p, knn.Parameter) and p.requires_grad for p in km.parameters())
    assert km.bn.num_batches_tracked.dtype == kiln.int64
    assert km.bn.running_mean.dtype.name == dtype


def test_to_dtype_keeps_ties_and_rejects_bad_targets():
    m = knn.Sequential(knn.Embedding(5, 4), knn.Linear(4, 5, bias=False))
    m[1].weight = m[0].weight
    m.to(kiln.float64)
    assert m[1].weight is m[0].weight and m[0].weight.dtype == kiln.float64
    m.to(dtype=kiln.float32, device="cpu")
    assert m[1].weight is m[0].weight and m[0].weight.dtype == kiln.float32
    same = m[0].weight
    m.to("cpu")
    m.float()
    assert m[0].weight is same  # no-op conversions keep the Parameter object
    m.to(kiln.zeros(1, dtype=kiln.float64))
    assert m[0].weight.dtype == kiln.float64
    with pytest.raises(TypeError, match="only accepts floating point"):
        m.to(kiln.int32)
    if not kiln.cuda.is_available():
        with pytest.raises(RuntimeError, match="^kiln: CUDA is not available: "):
            m.to("cuda")
        assert m[0].weight.device == "cpu"


def test_apply_visits_children_first_and_requires_grad():
    tm, km = both(make_net)
    seen_t, seen_k = [], []
    tm.apply(lambda m: seen_t.append(type(m).__name__))
    km.apply(lambda m: seen_k.append(type(m).__name__))
    assert seen_k == seen_t
    km.requires_grad_(False)
    assert not any(p.requires_grad for p in km.parameters())
    km.zero_grad()


# ------------------------------------------------------------------------------------------ repr


def repr_nets(fw, nn):
    return [
        make_net(fw, nn),
        nn.Sequential(
            nn.Conv1d(2, 4, 3, stride=2, padding=1, bias=False),
            nn.Conv2d(4, 8, (3, 5), padding="same", dilation=2, groups=2, padding_mode="reflect"),
            nn.MaxPool2d(2),
            nn.AvgPool2d(3, stride=1, padding=1),
            nn.AdaptiveAvgPool2d((1, None)),
            nn.Flatten(),
            nn.Unflatten(1, (2, 4)),
            nn.Dropout(0.25),
            nn.GELU(approximate="tanh"),
            nn.LeakyReLU(0.2, inplace=True),
            nn.ELU(),
            nn.Hardtanh(-2.0, 2.0),
            nn.Softplus(beta=2.0),
            nn.Softmax(dim=-1),
            nn.LogSoftmax(dim=1),
            nn.SiLU(),
            nn.Mish(),
            nn.Tanh(),
            nn.Sigmoid(),
            nn.Identity(),
        ),
        nn.ModuleList([nn.Linear(3, 3) for _ in range(3)] + [nn.LayerNorm(3), nn.LayerNorm(3)]),
        nn.ModuleDict({"emb": nn.Embedding(10, 4, padding_idx=0), "norm": nn.RMSNorm([4])}),
        nn.MultiheadAttention(8, 2, batch_first=True),
        nn.Sequential(
            nn.GroupNorm(2, 4),
            nn.BatchNorm1d(4, momentum=None, affine=False),
            nn.LayerNorm((4, 2), elementwise_affine=False),
            nn.Upsample(scale_factor=2),
        ),
        nn.Sequential(nn.CrossEntropyLoss(), nn.MSELoss(), nn.BCEWithLogitsLoss()),
        nn.ModuleList(),
    ]


def test_repr_matches_torch():
    torch.manual_seed(0)
    t_nets = repr_nets(torch, torch.nn)
    k_nets = repr_nets(kiln, knn)
    for k, t in zip(k_nets, t_nets, strict=True):
        assert repr(k) == repr(t)


def test_extra_repr_multiline_and_parameter_containers():
    class Custom(knn.Module):
        def extra_repr(self):
            return "a=1\nb=2"

    assert repr(Custom()) == "Custom(\n  a=1\n  b=2\n)"
    plist = knn.ParameterList([knn.Parameter(kiln.ones((2, 3))), kiln.zeros(2)])
    assert repr(plist) == (
        "ParameterList(\n    (0): Parameter containing: [kiln.float32 of size 2x3]\n"
        "    (1): Parameter containing: [kiln.float32 of size 2]\n)"
    )


# ----------------------------------------------------------------------------------------- hooks


def test_forward_hooks_modify_inputs_and_outputs():
    m = knn.Identity()
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    h2 = m.register_forward_hook(lambda mod, args, out: out * 2)
    h3 = m.register_forward_hook(lambda mod, args, out: calls.append("first"), prepend=True)
    x = kiln.ones(2)
    assert m(x).tolist() == [4.0, 4.0]
    assert calls == ["first"]
    h1.remove()
    assert m(x).tolist() == [2.0, 2.0]
    h2.remove()
    h3.remove()
    h3.remove()  # removing twice is harmless
    assert m(x).tolist() == [1.0, 1.0]


def test_forward_hooks_with_kwargs_and_context_manager():
    class Scale(knn.Module):
        def forward(self, x, factor=1.0):
            return x * factor

    m = Scale()

    def pre(mod, args, kwargs):
        return args, {"factor": 3.0}

    def post(mod, args, kwargs, out):
        assert kwargs == {"factor": 3.0}
        return out + 1

    with m.register_forward_pre_hook(pre, with_kwargs=True):
        with m.register_forward_hook(post, with_kwargs=True):
            assert m(kiln.ones(1)).tolist() == [4.0]
    assert m(kiln.ones(1)).tolist() == [1.0]
    bad = m.register_forward_pre_hook(lambda mod, a, k: 5, with_kwargs=True)
    with pytest.raises(RuntimeError, match="forward pre-hook must return None or a tuple"):
        m(kiln.ones(1))
    bad.remove()


def test_always_call_hook_runs_when_forward_raises():
    class Boom(knn.Module):
        def forward(self, x):
            raise ValueError("boom")

    m, seen = Boom(), []
    m.register_forward_hook(lambda mod, args, out: seen.append(out), always_call=True)
    with pytest.raises(ValueError, match="boom"):
        m(1)
    assert seen == [None]


# ------------------------------------------------------------------------------------ containers


def test_sequential_behaviour():
    a, b, c = knn.ReLU(), knn.Tanh(), knn.Sigmoid()
    s = knn.Sequential(a, b)
    assert len(s) == 2 and s[0] is a and s[-1] is b and list(s) == [a, b]
    assert isinstance(s[0:1], knn.Sequential) and list(s[0:1]) == [a]
    s.append(c)
    assert [n for n, _ in s.named_children()] == ["0", "1", "2"]
    s.insert(0, knn.Identity())
    assert isinstance(s[0], knn.Identity) and s[3] is c
    assert s.pop(0).__class__ is knn.Identity and len(s) == 3
    del s[1]
    assert list(s) == [a, c] and list(s._modules) == ["0", "1"]
    s[1] = b
    assert s[1] is b
    s.extend([c])
    assert len(s + knn.Sequential(a)) == 4 and len(s * 2) == 6
    with pytest.raises(IndexError, match="index 5 is out of range"):
        s[5]
    with pytest.raises(ValueError, match="add operator supports only objects of Sequential"):
        s + [a]
    named = knn.Sequential(OrderedDict([("first", a), ("second", b)]))
    assert named.first is a and list(named._modules) == ["first", "second"]
    x = kiln.zeros(2)
    assert_close(knn.Sequential(knn.Identity(), knn.Sigmoid())(x), torch.sigmoid(torch.zeros(2)))


def test_module_list_behaviour():
    layers = [knn.Linear(2, 2) for _ in range(3)]
    ml = knn.ModuleList(layers[:2])
    assert len(ml) == 2 and ml[-1] is layers[1]
    ml.append(layers[2])
    ml.insert(1, knn.ReLU())
    assert [type(m).__name__ for m in ml] == ["Linear", "ReLU", "Linear", "Linear"]
    ml.extend([knn.Tanh()])
    ml += [knn.Sigmoid()]
    assert len(ml) == 6 and isinstance(ml[1:3], knn.ModuleList) and len(ml[1:3]) == 2
    del ml[1]
    assert list(ml._modules) == [str(i) for i in range(5)]
    assert ml.pop(-1).__class__ is knn.Sigmoid
    ml[0] = knn.Identity()
    assert isinstance(ml[0], knn.Identity)
    assert len(ml + knn.ModuleList([knn.ReLU()])) == 5
    assert [n for n, _ in ml.named_parameters()] == ["1.weight", "1.bias", "2.weight", "2.bias"]
    with pytest.raises(IndexError, match="out of range"):
        ml[10]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        ml.extend(3)


def test_module_dict_behaviour():
    md = knn.ModuleDict({"a": knn.ReLU(), "b": knn.Linear(2, 2)})
    assert list(md.keys()) == ["a", "b"] and "a" in md and len(md) == 2
    md["c"] = knn.Tanh()
    md.update([("d", knn.Sigmoid())])
    assert list(md) == ["a", "b", "c", "d"]
    assert isinstance(md.pop("a"), knn.ReLU) and "a" not in md
    del md["c"]
    assert [k for k, _ in md.items()] == ["b", "d"] and len(list(md.values())) == 2
    assert [n for n, _ in md.named_parameters()] == ["b.weight", "b.bias"]
    with pytest.raises(ValueError, match="has length 3; 2 is required"):
        md.update([("x", knn.ReLU(), 1)])
    md.clear()
    assert len(md) == 0


def test_parameter_list_and_dict():
    pl = knn.ParameterList([kiln.ones(2), knn.Parameter(kiln.zeros(3))])
    assert all(isinstance(p, knn.Parameter) for p in pl) and len(pl) == 2
    pl.append(kiln.ones(1))
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert len(pl[1:]) == 2
    pd = knn.ParameterDict({"b": kiln.ones(1), "a": kiln.ones(2)})
    assert list(pd) == ["a", "b"]  # plain dicts are added in sorted order, as torch does
    pd["c"] = kiln.zeros(1)
    assert isinstance(pd["c"], knn.Parameter) and "c" in pd
    assert [n for n, _ in pd.named_parameters()] == ["a", "b", "c"]
    assert pd.pop("a").numel() == 2 and pd.get("a") is None
    with pytest.raises(RuntimeError, match="ParameterList should not be called"):
        pl(1)


def test_module_list_repr_compresses_repeats_like_torch():
    def build(fw, nn):
        return nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)])

    tm, km = both(build)
    assert repr(km) == repr(tm)
    assert re.search(r"\(0-1\): 2 x Linear", repr(km))
