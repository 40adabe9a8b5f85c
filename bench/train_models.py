"""Training workloads written once against the torch API (``m`` is ``torch`` or ``kiln``):
nanoGPT's model with its own ``configure_optimizers``, and a conv-BatchNorm-ReLU-pool net. Used by
bench/train.py and by tests/python/autograd/test_training.py (with only the module swapped).
"""

import inspect
import math


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


def conv_net(m, width=8, classes=10):
    """conv-BN-ReLU-pool twice, global average pool, linear head (ResNet's stem pattern)."""
    nn = m.nn
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, stride=2),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, classes),
    )


def unet(m, width=8, classes=3):
    """A two-level U-Net for segmentation: reflect-padded conv-BN-ReLU blocks, max-pool down, a
    transposed-convolution and a bilinear upsampling on the way up, skip connections joined by
    cat, per-pixel class logits (the decoder ops of image-to-image models)."""
    nn, F = m.nn, m.nn.functional

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, padding_mode="reflect", bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.down1, self.down2 = block(3, width), block(width, 2 * width)
            self.bottom = block(2 * width, 2 * width)
            self.up2 = nn.ConvTranspose2d(2 * width, 2 * width, 2, stride=2)
            self.dec2, self.dec1 = block(4 * width, width), block(2 * width, width)
            self.head = nn.Conv2d(width, classes, 1)

        def forward(self, x):
            s1 = self.down1(x)
            s2 = self.down2(F.max_pool2d(s1, 2))
            b = self.bottom(F.max_pool2d(s2, 2))
            d2 = self.dec2(m.cat([self.up2(b), s2], 1))
            up = F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
            return self.head(self.dec1(m.cat([up, s1], 1)))

    return UNet()



def llama_classes(m, vocab=512, dim=128, n_layers=4, n_heads=4, n_kv=2, hidden=344, max_seq=128):
    """A LLaMA-style decoder as Meta's reference model writes it: RMSNorm in float32, rotary
    embeddings by rotate_half, grouped-query attention (repeat_kv by expand + reshape), a
    SwiGLU MLP, an additive causal mask from finfo(dtype).min and triu."""
    nn, F = m.nn, m.nn.functional
    hd = dim // n_heads

    class RMSNorm(nn.Module):
        def __init__(self, eps=1e-6):
            super().__init__()
            self.eps, self.weight = eps, nn.Parameter(m.ones(dim))

        def forward(self, x):
            h = x.float()
            h = h * m.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return h.type_as(x) * self.weight

    def rotate_half(x):
        return m.cat((-x[..., hd // 2:], x[..., : hd // 2]), dim=-1)

    def repeat_kv(x, n_rep):
        b, kv, t, d = x.shape
        return x[:, :, None].expand(b, kv, n_rep, t, d).reshape(b, kv * n_rep, t, d)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = nn.Linear(dim, n_heads * hd, bias=False)
            self.wk = nn.Linear(dim, n_kv * hd, bias=False)
            self.wv = nn.Linear(dim, n_kv * hd, bias=False)
            self.wo = nn.Linear(n_heads * hd, dim, bias=False)

        def forward(self, x, cos, sin, mask):
            b, t, _ = x.shape
            q = self.wq(x).view(b, t, n_heads, hd).transpose(1, 2)
            k = self.wk(x).view(b, t, n_kv, hd).transpose(1, 2)
            v = self.wv(x).view(b, t, n_kv, hd).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k, n_heads // n_kv), repeat_kv(v, n_heads // n_kv)
            scores = m.matmul(q, k.transpose(2, 3)) / math.sqrt(hd) + mask
            out = m.matmul(F.softmax(scores.float(), dim=-1).type_as(q), v)
            return self.wo(out.transpose(1, 2).contiguous().view(b, t, -1))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention, self.attention_norm, self.ffn_norm = Attention(), RMSNorm(), RMSNorm()
            self.w1 = nn.Linear(dim, hidden, bias=False)
            self.w2 = nn.Linear(hidden, dim, bias=False)
            self.w3 = nn.Linear(dim, hidden, bias=False)

        def forward(self, x, cos, sin, mask):
            h = x + self.attention(self.attention_norm(x), cos, sin, mask)
            f = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(f)) * self.w3(f))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList([Block() for _ in range(n_layers)])
            self.norm, self.output = RMSNorm(), nn.Linear(dim, vocab, bias=False)
            inv = 1.0 / (10000.0 ** (m.arange(0, hd, 2).float() / hd))
            freqs = m.outer(m.arange(max_seq, dtype=m.float32), inv)
            emb = m.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)

        def forward(self, tokens, targets):
            t = tokens.shape[1]
            h = self.tok(tokens)
            mask = m.triu(m.full((t, t), m.finfo(h.dtype).min), diagonal=1)
            for layer in self.layers:
                h = layer(h, self.cos[:t], self.sin[:t], mask)
            logits = self.output(self.norm(h)).float()
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss

    return Llama
