"""Run as a plain script (not under torchrun): ``Trainer(accelerator="torch_tpu", devices=2)``
picks DDP, and Lightning's subprocess launcher starts rank 1 by running this script again.

    python tests/python/dist_workers/lightning_ddp.py CHECKPOINT_DIR

Each rank trains on its share of every global batch (Lightning's DistributedSampler) and must see
the per-step losses that single-process PyTorch CPU training on the whole batch gives its share,
end with that training's parameters, and run nothing on the CPU fallback. Each rank prints one
line on success; rank 0's ModelCheckpoint writes CHECKPOINT_DIR/last.ckpt.
"""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch_tpu  # noqa: E402
from torchvision_compat import make_torchvision_importable  # noqa: E402

make_torchvision_importable()
from lightning_regressor import (Regressor, build_net, dataset, loader,  # noqa: E402
                                 make_optimizer, trainer)

WORLD = 2
BATCH = 4  # per rank


def reference():
    """Per-step losses of each rank's half, and the final parameters, of CPU training on the
    whole batch (DDP averages the ranks' gradients: the gradient of the whole batch's mean)."""
    net = build_net()
    optimizer, scheduler = make_optimizer(net.parameters())
    inputs, targets = dataset().tensors
    # Lightning gives a training loader a shuffling DistributedSampler (seed PL_GLOBAL_SEED or 0).
    halves = [list(torch.utils.data.DistributedSampler(dataset(), WORLD, rank, shuffle=True,
                                                       seed=0)) for rank in range(WORLD)]
    losses = [[] for _ in range(WORLD)]
    for start in range(0, len(halves[0]), BATCH):
        rows = [half[start:start + BATCH] for half in halves]
        for rank in range(WORLD):
            with torch.no_grad():
                losses[rank].append(torch.nn.functional.mse_loss(
                    net(inputs[rows[rank]]), targets[rows[rank]]).item())
        every = sum(rows, [])
        loss = torch.nn.functional.mse_loss(net(inputs[every]), targets[every])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
    return losses, net.state_dict()


def main(checkpoints):
    model = Regressor(sync_dist=True)
    run = trainer("torch_tpu", checkpoints, devices=WORLD, max_epochs=1)
    run.fit(model, loader(BATCH), loader(BATCH))
    rank = run.global_rank
    strategy = run.strategy
    assert type(strategy).__name__ == "DDPStrategy", strategy
    assert strategy.root_device == torch.device("tpu", rank), strategy.root_device
    assert dist.get_backend() == "tpu_dist", dist.get_backend()
    assert model.seen == {(torch.device("tpu", rank), torch.device("tpu", rank), False,
                           torch.float32)}, model.seen
    losses, parameters = reference()
    torch.testing.assert_close(torch.tensor(model.losses), torch.tensor(losses[rank]),
                               rtol=1e-5, atol=1e-6)
    trained = {name: value.cpu() for name, value in model.net.state_dict().items()}
    torch.testing.assert_close(trained, parameters, rtol=1e-5, atol=1e-6)
    fallback = torch_tpu.metrics().get("fallback_ops", {})
    assert fallback == {}, fallback
    print(f"rank {rank}: DDPStrategy over tpu_dist on tpu:{rank}, losses match CPU, no fallback",
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
