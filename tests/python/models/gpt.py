"""A GPT-style decoder written once against the torch API and run with torch and with kiln.

``build(torch, nn, F)`` returns the GPT class for whichever framework modules it is given, so
the model text is literally the same for both.
"""


def build(torch, nn, F):
    class CausalSelfAttention(nn.Module):
        """Hand-written multi-head attention on F.scaled_dot_product_attention(is_causal=True)."""

        def __init__(self, d_model, n_head, dropout):
            super().__init__()
            self.n_head = n_head
            self.dropout = dropout
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)
            self.resid_drop = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            p = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.resid_drop(self.proj(y))

    class MHASelfAttention(nn.Module):
        """The same attention through nn.MultiheadAttention with a boolean causal mask."""

        def __init__(self, d_model, n_head, dropout):
            super().__init__()
            self.attn = nn.MultiheadAttention(d_model, n_head, dropout=dropout, batch_first=True)

        def forward(self, x):
            T = x.size(1)
            pos = torch.arange(T, device=x.device)
            mask = pos.unsqueeze(0) > pos.unsqueeze(1)  # True above the diagonal: future tokens
            out, _ = self.attn(x, x, x, attn_mask=mask, need_weights=False, is_causal=True)
            return out

    class MLP(nn.Module):
        def __init__(self, d_model, dropout):
            super().__init__()
            self.fc = nn.Linear(d_model, 4 * d_model)
            self.act = nn.GELU(approximate="tanh")
            self.proj = nn.Linear(4 * d_model, d_model)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            return self.drop(self.proj(self.act(self.fc(x))))

    class Block(nn.Module):
        def __init__(self, d_model, n_head, dropout, use_mha):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d_model)
            attn_cls = MHASelfAttention if use_mha else CausalSelfAttention
            self.attn = attn_cls(d_model, n_head, dropout)
            self.ln_2 = nn.LayerNorm(d_model)
            self.mlp = MLP(d_model, dropout)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(
            self,
            vocab_size=50,
            block_size=16,
            d_model=32,
            n_head=4,
            n_layer=2,
            dropout=0.0,
            use_mha=False,
        ):
            super().__init__()
            self.block_size = block_size
            self.tok_emb = nn.Embedding(vocab_size, d_model)
            self.pos_emb = nn.Embedding(block_size, d_model)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList(
                [Block(d_model, n_head, dropout, use_mha) for _ in range(n_layer)]
            )
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab_size, bias=False)
            self.head.weight = self.tok_emb.weight  # weight tying
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            B, T = idx.size()
            if T > self.block_size:
                raise ValueError(f"sequence of length {T} exceeds block size {self.block_size}")
            pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
            x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln_f(x))
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss

    return GPT
