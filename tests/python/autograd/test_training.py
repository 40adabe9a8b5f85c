"""Training loops written for torch, run with only the imports swapped: kiln must follow torch's
loss curve step by step and end at torch's weights, from the same initial weights and data.

Tolerances (float32 throughout): losses rtol 2e-4 per step, final weights atol 2e-4 — the
libraries sum in different orders, and 20 optimizer steps amplify the last-bit differences.
"""

import inspect
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402


def gpt_classes(m, vocab=48, block=8, n_embd=32, n_head=4, n_layer=2):
    """nanoGPT's model, verbatim in structure (dropout 0 so both runs are deterministic)."""
    nn, F = m.nn, m.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.register_buffer("bias", m.tril(m.ones(block, block)).view(1, 1, block, block))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(
                dict(
                    wte=nn.Embedding(vocab, n_embd),
                    wpe=nn.Embedding(block, n_embd),
                    h=nn.ModuleList([Block() for _ in range(n_layer)]),
                    ln_f=nn.LayerNorm(n_embd),
                )
            )
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying

        def forward(self, idx, targets):
            b, t = idx.size()
            pos = m.arange(0, t, dtype=m.long)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for blk in self.transformer.h:
                x = blk(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas):
            param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
            decay = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay = [p for n, p in param_dict.items() if p.dim() < 2]
            groups = [
                {"params": decay, "weight_decay": weight_decay},
                {"params": nodecay, "weight_decay": 0.0},
            ]
            fused = "fused" in inspect.signature(m.optim.AdamW).parameters
            extra = dict(fused=True) if fused else dict()
            return m.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)

    return GPT


def conv_net(m):
    nn = m.nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def copy_weights(torch_model, kiln_model):
    state = {k: kiln.tensor(v.detach().numpy().copy()) for k, v in torch_model.state_dict().items()}
    kiln_model.load_state_dict(state)


def assert_same_weights(torch_model, kiln_model, atol, noise=None):
    """``noise`` maps a name to a slice whose gradient is pure rounding noise (attention's key
    bias: softmax is invariant to it, so its exact gradient is 0 and Adam amplifies whatever
    rounding leaves); those entries are held to the optimizer's step size instead."""
    ks = kiln_model.state_dict()
    for name, tv in torch_model.state_dict().items():
        k, t = ks[name].detach().numpy(), tv.detach().numpy()
        if noise and name in noise:
            sl = noise[name]
            np.testing.assert_allclose(k[sl], t[sl], atol=5e-2, err_msg=name)
            k, t = np.delete(k, np.r_[sl]), np.delete(t, np.r_[sl])
        np.testing.assert_allclose(k, t, atol=atol, rtol=1e-3, err_msg=name)


def test_nanogpt_training_loop_follows_torch():
    torch.manual_seed(0)
    tm = gpt_classes(torch)()
    km = gpt_classes(kiln)()
    copy_weights(tm, km)
    topt = tm.configure_optimizers(0.1, 3e-3, (0.9, 0.95))
    kopt = km.configure_optimizers(0.1, 3e-3, (0.9, 0.95))
    rng = np.random.default_rng(0)
    for step in range(20):
        x = rng.integers(0, 48, (4, 8))
        y = np.roll(x, -1, axis=1)
        losses = []
        for lib, model, opt in ((torch, tm, topt), (kiln, km, kopt)):
            _, loss = model(lib.tensor(x), lib.tensor(y))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append((loss.item(), float(norm)))
        (tl, tn), (kl, kn) = losses
        np.testing.assert_allclose(kl, tl, rtol=2e-4, err_msg=f"loss at step {step}")
        np.testing.assert_allclose(kn, tn, rtol=2e-3, err_msg=f"grad norm at step {step}")
    assert losses[0][0] < math.log(48) + 0.5  # it trained from a sane start
    key_bias = slice(32, 64)
    noise = {f"transformer.h.{i}.attn.c_attn.bias": key_bias for i in range(2)}
    assert_same_weights(tm, km, atol=2e-4, noise=noise)


def test_conv_batchnorm_sgd_training_loop_follows_torch():
    torch.manual_seed(1)
    tm, km = conv_net(torch), conv_net(kiln)
    copy_weights(tm, km)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    kopt = kiln.optim.SGD(km.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    first = None
    for step in range(20):
        losses = []
        for lib, model, opt in ((torch, tm, topt), (kiln, km, kopt)):
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(lib.tensor(x)), lib.tensor(y))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.testing.assert_allclose(losses[1], losses[0], rtol=2e-4, err_msg=f"loss at step {step}")
        first = first if first is not None else losses[0]
    assert losses[0] < first  # the loss went down
    assert_same_weights(tm, km, atol=2e-4)  # running statistics and num_batches_tracked too
