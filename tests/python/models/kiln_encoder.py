"""A text classifier written for torch with only its imports changed to kiln.

The test reads this file, swaps the three import lines back to torch and runs both versions.
"""

import kiln as torch
import kiln.nn as nn
import kiln.nn.functional as F


class EncoderClassifier(nn.Module):
    def __init__(self, vocab_size=40, max_len=12, d_model=16, n_head=2, n_classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Parameter(torch.zeros(1, max_len, d_model))
        self.attn = nn.MultiheadAttention(d_model, n_head, batch_first=True)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, 2 * d_model), nn.SiLU(), nn.Linear(2 * d_model, d_model)
        )
        self.norm2 = nn.RMSNorm(d_model, eps=1e-6)
        self.out = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        pad = tokens == 0
        x = self.embed(tokens) + self.pos[:, : tokens.size(1)]
        attended, weights = self.attn(x, x, x, key_padding_mask=pad)
        x = self.norm1(x + attended)
        x = self.norm2(x + self.ff(x))
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return F.softmax(self.out(pooled), dim=-1), weights
