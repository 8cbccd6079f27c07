"""A small diffusion-style UNet trained to predict noise on synthetic images, on CPU and on `tpu` from the same seed.

    .venv/bin/python examples/unet.py [--steps 20] [--width 8] [--size 16] [--device-only tpu] [--no-check]

The network: a 3x3 stem conv, three down levels of residual blocks (GroupNorm, SiLU, 3x3 conv, the
timestep embedding added in between, a 1x1 conv shortcut when the width changes) each followed by a
stride-2 conv, a middle block, and three up levels that upsample three different ways: a learned
ConvTranspose2d (2 -> 4), bilinear interpolation + conv (4 -> 8) and nearest interpolation + conv
(8 -> 16), each concatenating the skip connection of its level before a residual block; a GroupNorm,
SiLU and 3x3 conv head. The timestep enters as a sinusoidal embedding through a two-layer MLP.
The task is DDPM's: given x_t = sqrt(a_t) x_0 + sqrt(1 - a_t) noise for a random step t, predict
the noise (MSE loss). Images are smooth random blobs. Both runs start from identical weights and
batches, so their per-step losses must agree; the script checks that, checks that the loss went
down and that the tpu run used no CPU fallback, and prints each device's throughput.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch.nn import functional as F

import torch_tpu  # noqa: F401  (registers the tpu device)
from parity import add_common_arguments, check_parity, optimize, run_devices  # noqa: F401  (check_parity: tests)

DIFFUSION_STEPS = 100


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Transformer-style sinusoidal features of the (float) timesteps t: (B,) -> (B, dim)."""
    half = dim // 2
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    angles = t.float()[:, None] * frequencies[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class ResBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, time_dim: int, groups: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, inputs)
        self.conv1 = nn.Conv2d(inputs, outputs, 3, padding=1)
        self.time = nn.Linear(time_dim, outputs)
        self.norm2 = nn.GroupNorm(groups, outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1)
        self.shortcut = nn.Conv2d(inputs, outputs, 1) if inputs != outputs else nn.Identity()

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(t)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.shortcut(x)


class Up(nn.Module):
    """Doubles the resolution (`how`: convtranspose, bilinear or nearest), then concatenates the
    skip connection and applies a residual block."""

    def __init__(self, inputs: int, skip: int, outputs: int, time_dim: int, groups: int, how: str):
        super().__init__()
        self.how = how
        if how == "convtranspose":
            self.up = nn.ConvTranspose2d(inputs, inputs, 2, stride=2)
        else:
            self.up = nn.Conv2d(inputs, inputs, 3, padding=1)
        self.block = ResBlock(inputs + skip, outputs, time_dim, groups)

    def forward(self, x: torch.Tensor, skip: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if self.how == "convtranspose":
            x = self.up(x)
        elif self.how == "bilinear":
            x = self.up(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
        else:
            x = self.up(F.interpolate(x, scale_factor=2, mode="nearest"))
        return self.block(torch.cat([x, skip], dim=1), t)


class UNet(nn.Module):
    def __init__(self, channels: int = 3, width: int = 8, groups: int = 4):
        super().__init__()
        widths = [width, 2 * width, 2 * width]
        time_dim = 4 * width
        self.time_features = width
        self.time_mlp = nn.Sequential(nn.Linear(width, time_dim), nn.SiLU(), nn.Linear(time_dim, time_dim))
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.down_blocks, self.downsample = nn.ModuleList(), nn.ModuleList()
        inputs = width
        for outputs in widths:
            self.down_blocks.append(ResBlock(inputs, outputs, time_dim, groups))
            self.downsample.append(nn.Conv2d(outputs, outputs, 3, stride=2, padding=1))
            inputs = outputs
        self.middle = ResBlock(inputs, inputs, time_dim, groups)
        self.up_blocks = nn.ModuleList()
        for outputs, how in zip(reversed(widths), ["convtranspose", "bilinear", "nearest"]):
            self.up_blocks.append(Up(inputs, outputs, outputs, time_dim, groups, how))
            inputs = outputs
        self.head = nn.Sequential(nn.GroupNorm(groups, inputs), nn.SiLU(), nn.Conv2d(inputs, channels, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        t = self.time_mlp(timestep_embedding(t, self.time_features))
        h = self.stem(x)
        skips = []
        for block, down in zip(self.down_blocks, self.downsample):
            h = block(h, t)
            skips.append(h)
            h = down(h)
        h = self.middle(h, t)
        for up in self.up_blocks:
            h = up(h, skips.pop(), t)
        return self.head(h)


def alpha_bars() -> torch.Tensor:
    """Cumulative products of a linear beta schedule (DDPM), one per diffusion step."""
    return torch.cumprod(1.0 - torch.linspace(1e-4, 0.05, DIFFUSION_STEPS), dim=0)


def make_batches(steps: int, batch: int, seed: int, size: int = 16,
                 channels: int = 3) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """`steps` (x_t, t, noise) batches drawn on CPU from `seed`: noised images of random blobs."""
    generator = torch.Generator().manual_seed(seed)
    grid = torch.linspace(-1, 1, size)
    ys, xs = grid[:, None], grid[None, :]
    schedule = alpha_bars()
    batches = []
    for _ in range(steps):
        centres = torch.rand(batch, channels, 2, generator=generator) * 1.6 - 0.8
        radii = 0.2 + 0.4 * torch.rand(batch, channels, 1, 1, generator=generator)
        distance = (ys - centres[..., 0, None, None]) ** 2 + (xs - centres[..., 1, None, None]) ** 2
        images = 2 * torch.exp(-distance / radii**2) - 1
        t = torch.randint(0, DIFFUSION_STEPS, (batch,), generator=generator)
        noise = torch.randn(batch, channels, size, size, generator=generator)
        a = schedule[t][:, None, None, None]
        batches.append((a.sqrt() * images + (1 - a).sqrt() * noise, t, noise))
    return batches


def build(seed: int, width: int = 8, groups: int = 4) -> UNet:
    torch.manual_seed(seed)
    return UNet(width=width, groups=groups)


def train(device: str | torch.device = "tpu", steps: int = 20, seed: int = 0, **options) -> list[float]:
    """Train for `steps` AdamW steps on `device`; return the per-step losses (floats)."""
    return train_model(device, steps, seed, **options)[1]


def train_model(device: str | torch.device = "tpu", steps: int = 20, seed: int = 0, *, batch: int = 8,
                size: int = 16, width: int = 8, groups: int = 4, lr: float = 3e-3,
                timings: list[float] | None = None) -> tuple[UNet, list[float]]:
    """Train for `steps` AdamW steps on `device`; return the model and the per-step losses.
    `timings`, when given, receives the wall time at the end of each step (losses read back)."""
    device = torch.device(device)
    model = build(seed, width, groups).to(device)  # identical weights everywhere
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    for noisy, t, noise in make_batches(steps, batch, seed, size):
        noisy, t, noise = noisy.to(device), t.to(device), noise.to(device)
        loss = F.mse_loss(model(noisy, t), noise)
        optimize(optimizer, loss, losses, timings)
    return model, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, batch=8)
    parser.add_argument("--size", type=int, default=16, help="image side (a multiple of 8)")
    parser.add_argument("--width", type=int, default=8, help="channels of the first level")
    args = parser.parse_args()
    run_devices(train_model, args, size=args.size, width=args.width)


if __name__ == "__main__":
    main()
