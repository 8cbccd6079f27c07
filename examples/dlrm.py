"""A small DLRM (deep learning recommendation model) trained on synthetic click data, on CPU and on `tpu` from the same seed.

    .venv/bin/python examples/dlrm.py [--steps 20] [--optimizer sgd|adagrad] [--device-only tpu] [--no-check]

The model: dense features go through a bottom MLP; each sparse feature is a bag of ids (a variable
number per sample, given as flat ids plus offsets) reduced by an EmbeddingBag (sum for even tables,
mean for odd ones); the bottom MLP's output and the bag embeddings interact through the dot
products of every pair, which a top MLP turns into a click logit (BCE-with-logits loss). It trains
with SGD (momentum 0.9) or with Adagrad, the optimizers DLRMs use. Clicks come from a fixed random "teacher"
over the same features, so there is something to learn. Both runs start from identical weights and
batches, so their per-step losses must agree; the script checks that, checks that the loss went
down and that the tpu run used no CPU fallback, and prints each device's throughput.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F

import torch_tpu  # noqa: F401  (registers the tpu device)
from parity import add_common_arguments, check_parity, optimize, run_devices  # noqa: F401  (check_parity: tests)


# Rows of each embedding table: small, so that each row gets gradient updates in a few steps.
TABLES = (20, 10, 30, 15)


def mlp(sizes: list[int], last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for index, (inputs, outputs) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(inputs, outputs))
        if last_activation or index < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, dense: int = 13, tables: tuple[int, ...] = TABLES, dim: int = 16,
                 bottom: tuple[int, ...] = (32,), top: tuple[int, ...] = (32,)):
        super().__init__()
        self.bottom = mlp([dense, *bottom, dim], last_activation=True)
        self.embeddings = nn.ModuleList(
            nn.EmbeddingBag(rows, dim, mode="sum" if index % 2 == 0 else "mean")
            for index, rows in enumerate(tables))
        features = len(tables) + 1
        # Strictly lower-triangular pairs (i > j) of the features' dot-product matrix, built once
        # on the host: a buffer, so it moves with the model.
        rows, columns = torch.tril_indices(features, features, offset=-1)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_columns", columns, persistent=False)
        self.top = mlp([dim + rows.numel(), *top, 1], last_activation=False)

    def forward(self, dense: torch.Tensor, ids: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)
        bags = [embedding(i, o) for embedding, i, o in zip(self.embeddings, ids, offsets)]
        features = torch.stack([x, *bags], dim=1)  # (batch, features, dim)
        products = torch.bmm(features, features.transpose(1, 2))
        pairs = products[:, self.pair_rows, self.pair_columns]
        return self.top(torch.cat([x, pairs], dim=1)).squeeze(1)


Batch = tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], torch.Tensor]


def make_batches(steps: int, batch: int, seed: int, dense: int = 13, tables: tuple[int, ...] = TABLES,
                 ids_per_sample: int = 3, distinct: int = 4) -> list[Batch]:
    """`steps` (dense, ids, offsets, clicks) batches drawn on CPU from `seed`, cycling through
    `distinct` of them. Each sample's bag in each table holds 0 to 2 * ids_per_sample ids, but
    every batch has batch * ids_per_sample ids per table, so shapes (and compiled programs) stay
    the same from step to step. Clicks come from a fixed random linear teacher over the dense
    features and per-id scores."""
    generator = torch.Generator().manual_seed(seed)
    teacher_dense = torch.randn(dense, generator=generator)
    teacher_ids = [torch.randn(rows, generator=generator) for rows in tables]
    total = batch * ids_per_sample
    unique = []
    for _ in range(distinct):
        x = torch.randn(batch, dense, generator=generator)
        ids, offsets = [], []
        score = x @ teacher_dense / dense**0.5
        for rows, table_scores in zip(tables, teacher_ids):
            flat = torch.randint(0, rows, (total,), generator=generator)
            cuts = torch.randint(0, total + 1, (batch - 1,), generator=generator).sort().values
            starts = torch.cat([torch.zeros(1, dtype=torch.long), cuts])
            bag = torch.searchsorted(starts, torch.arange(total), right=True) - 1
            score = score + torch.zeros(batch).index_add_(0, bag, table_scores[flat])
            ids.append(flat)
            offsets.append(starts)
        clicks = (torch.sigmoid(2 * score) > torch.rand(batch, generator=generator)).float()
        unique.append((x, ids, offsets, clicks))
    return [unique[step % distinct] for step in range(steps)]


def build(seed: int, **config) -> DLRM:
    torch.manual_seed(seed)
    return DLRM(**config)


def train(device: str | torch.device = "tpu", steps: int = 20, seed: int = 0, **options) -> list[float]:
    """Train for `steps` steps on `device`; return the per-step losses (floats)."""
    return train_model(device, steps, seed, **options)[1]


def train_model(device: str | torch.device = "tpu", steps: int = 20, seed: int = 0, *, batch: int = 32,
                optimizer: str = "adagrad", lr: float | None = None, dim: int = 16,
                tables: tuple[int, ...] = TABLES,
                timings: list[float] | None = None) -> tuple[DLRM, list[float]]:
    """Train for `steps` SGD or Adagrad steps on `device`; return the model and the per-step
    losses. `timings`, when given, receives the wall time at the end of each step."""
    device = torch.device(device)
    model = build(seed, dim=dim, tables=tables).to(device)  # identical weights everywhere
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr or 0.1, momentum=0.9)
    elif optimizer == "adagrad":
        opt = torch.optim.Adagrad(model.parameters(), lr=lr or 0.05)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r} (sgd or adagrad)")
    losses = []
    for x, ids, offsets, clicks in make_batches(steps, batch, seed, tables=tables):
        x, clicks = x.to(device), clicks.to(device)
        ids = [i.to(device) for i in ids]
        offsets = [o.to(device) for o in offsets]
        loss = F.binary_cross_entropy_with_logits(model(x, ids, offsets), clicks)
        optimize(opt, loss, losses, timings)
    return model, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, batch=32)
    parser.add_argument("--optimizer", choices=["sgd", "adagrad"], default="adagrad")
    args = parser.parse_args()
    run_devices(train_model, args, f"{args.optimizer} steps", optimizer=args.optimizer)


if __name__ == "__main__":
    main()
