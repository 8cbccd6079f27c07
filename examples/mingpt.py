"""A small GPT trained on a tiny character task, on CPU and on `tpu` from the same seed.

    .venv/bin/python examples/mingpt.py [--steps 20] [--device-only tpu] [--no-check]

The model (token + position embeddings, pre-LayerNorm blocks of masked causal self-attention and a
GELU MLP with residuals, a final LayerNorm and a linear head tied to the token embedding) learns to
continue a short text. Both runs start from identical weights (built on CPU, then moved) and see
identical batches (drawn on CPU from a seeded generator, then moved), so their per-step losses
must agree; the script checks that, checks that the loss went down, and checks that the tpu run
used no CPU fallback.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch.nn import functional as F

# No `import torch_tpu`: `import torch` loads it (PyTorch's backend autoload), and the model is
# plain PyTorch, so other backends (benchmarks/torchax_step.py) can build it too.
from parity import (add_common_arguments, character_batches, check_parity, init_weights,  # noqa: F401
                    optimize, run_devices)  # (check_parity: used by tests)

TEXT = (
    "the quick brown fox jumps over the lazy dog. "
    "a tpu is a device; pytorch sends it every op. "
    "small models learn small texts quickly. "
)
VOCAB = sorted(set(TEXT))


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, block: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attention_dropout = nn.Dropout(dropout)
        self.residual_dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(block, block, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length = x.shape[:2]
        # Thirds and "-1 heads" rather than fixed sizes: under tensor parallelism (qkv split by
        # columns, its rows ordered so that each rank holds its heads' q, k and v) a rank has
        # only its heads. (batch, heads, length, head_dim)
        q, k, v = self.qkv(x).chunk(3, dim=2)
        q, k, v = (t.view(batch, length, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        scores = scores.masked_fill(~self.mask[:length, :length], float("-inf"))
        weights = self.attention_dropout(F.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).contiguous().view(batch, length, -1)
        return self.residual_dropout(self.proj(out))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, block: int, dropout: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = CausalSelfAttention(dim, heads, block, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int = 32, layers: int = 2, heads: int = 2, dim: int = 64,
                 dropout: float = 0.0, tied: bool = True):
        super().__init__()
        self.block = block
        self.token_embedding = nn.Embedding(vocab, dim)
        self.position_embedding = nn.Embedding(block, dim)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, block, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        # Tied: the head reuses the token embedding matrix through F.linear rather than sharing a
        # Parameter between two modules, because Module.to("tpu") replaces each module's Parameters
        # with new ones (CPU and tpu tensors are not shallow-copy compatible), which would untie them.
        self.head = None if tied else nn.Linear(dim, vocab, bias=False)
        self.apply(init_weights)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None):
        length = tokens.size(1)
        positions = torch.arange(length, device=tokens.device)
        x = self.dropout(self.token_embedding(tokens) + self.position_embedding(positions))
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        logits = F.linear(x, self.token_embedding.weight) if self.head is None else self.head(x)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_batches(steps: int, batch: int, block: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` (input, target) batches of `block` characters from TEXT, drawn on CPU from `seed`."""
    return character_batches(TEXT, steps, batch, block, seed)


def build(seed: int, block: int = 32, layers: int = 2, heads: int = 2, dim: int = 64,
          dropout: float = 0.0, tied: bool = True) -> GPT:
    torch.manual_seed(seed)
    return GPT(len(VOCAB), block, layers, heads, dim, dropout, tied)


def train(device: str | torch.device = "tpu", steps: int = 20, seed: int = 0, **options) -> list[float]:
    """Train for `steps` AdamW steps on `device`; return the per-step losses (floats)."""
    return train_model(device, steps, seed, **options)[1]


def train_model(device: str | torch.device = "tpu", steps: int = 20, seed: int = 0, *, batch: int = 8,
                block: int = 32, layers: int = 2, heads: int = 2, dim: int = 64, dropout: float = 0.0,
                tied: bool = True, lr: float = 3e-3, foreach: bool | None = None,
                timings: list[float] | None = None) -> tuple[GPT, list[float]]:
    """Train for `steps` AdamW steps on `device`; return the model and the per-step losses.
    `timings`, when given, receives the wall time at the end of each step (losses read back)."""
    device = torch.device(device)
    model = build(seed, block, layers, heads, dim, dropout, tied).to(device)  # identical weights everywhere
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, foreach=foreach)
    losses = []
    for x, y in make_batches(steps, batch, block, seed):
        x, y = x.to(device), y.to(device)
        _, loss = model(x, y)
        optimize(optimizer, loss, losses, timings)
    return model, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, batch=8)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--untied", action="store_true", help="separate head weights")
    args = parser.parse_args()
    run_devices(train_model, args, unit="tokens", per_sample=args.block, block=args.block, layers=args.layers,
                heads=args.heads, dim=args.dim, tied=not args.untied)


if __name__ == "__main__":
    main()
