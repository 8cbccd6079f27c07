"""Benchmark models that are not among the examples: plain PyTorch (no torch_tpu import), so that
every peer (benchmarks/torchax_step.py runs them on JAX) builds the same module."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class ResidualBlock(nn.Module):
    """LayerNorm -> Linear -> GELU -> Linear, plus the input: small elementwise-heavy ops."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(self.norm(x)))) + x


def residual_mlp(seed: int, dim: int = 128, blocks: int = 4) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(*[ResidualBlock(dim) for _ in range(blocks)])


def residual_mlp_batch(seed: int, batch: int = 16, dim: int = 128) -> torch.Tensor:
    return torch.randn(batch, dim, generator=torch.Generator().manual_seed(seed))


def residual_mlp_loss(output: torch.Tensor) -> torch.Tensor:
    return output.square().mean()
