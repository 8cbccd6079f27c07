"""Run as one job of two torchrun launches ("nodes") of 2 processes each, on tpu_dist.

    torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT \
        tests/python/dist_workers/multinode.py ddp|fsdp2|kill N|hang N

Every rank reports the device it drives: tpu:LOCAL_RANK of LOCAL_WORLD_SIZE CPU-plugin devices,
whatever its global RANK. ``ddp`` and ``fsdp2`` (then HSDP: replicated across nodes,
sharded within them) train a tiny MLP for a few SGD steps on a global
batch the 4 ranks split; the losses (averaged over ranks) and the final parameters must match
single-process PyTorch CPU training on the whole batch. ``kill N``: after a barrier both processes
of node N SIGKILL themselves; the other node's ranks must fail their next collective within the
group's timeout, naming the dead ranks. ``hang N``: node N's ranks stop calling collectives
(alive, their connections open: a node that froze or dropped off the network); the others'
collective must time out at the group's timeout (5 s here), naming them.
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import torch_tpu
from outcome import exit_with_outcome, say

STEPS = 3
BATCH = 8
LR = 0.1
mode = sys.argv[1]
# A hung node is only noticed at the group's timeout: a short one keeps that check quick.
TIMEOUT_S = 5 if mode == "hang" else 20
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
node = int(os.environ["GROUP_RANK"])
torch.tpu.set_device(local_rank)
device = torch.device("tpu", local_rank)
dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=TIMEOUT_S))
say(f"rank {rank}: node {node}, local rank {local_rank}, drives "
    f"tpu:{torch.tpu.current_device()} of {torch.tpu.device_count()}")


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


generator = torch.Generator().manual_seed(1)
batches = [(torch.randn(BATCH, 8, generator=generator), torch.randn(BATCH, 4, generator=generator))
           for _ in range(STEPS)]


def train(model, inputs_of):
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for x, y in batches:
        x, y = inputs_of(x), inputs_of(y)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses


def shard(tensor):
    per_rank = tensor.shape[0] // world
    return tensor[rank * per_rank:(rank + 1) * per_rank].to(device)


def check(name, model, losses, full_parameters):
    reference = build()
    expected = train(reference, lambda t: t)
    losses = torch.stack(losses)
    dist.all_reduce(losses, op=dist.ReduceOp.AVG)
    torch.testing.assert_close(losses.cpu(), torch.stack(expected).detach())
    for (name_, actual), expected_parameter in zip(full_parameters(model),
                                                   reference.parameters()):
        torch.testing.assert_close(actual.cpu(), expected_parameter.detach(), msg=name_)
    say(f"rank {rank}: {name}: losses {[round(v, 5) for v in losses.tolist()]} and final "
        f"parameters match single-process training")


if mode == "ddp":
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(build().to(device))
    losses = train(model, shard)
    check("ddp", model, losses, lambda m: m.module.named_parameters())
elif mode == "fsdp2":
    from torch.distributed.fsdp import fully_shard

    # Sharded over all 4 ranks, then HSDP (the usual multi-node layout): replicated across the
    # nodes, sharded within each, on a 2-D mesh whose subgroups span and split the nodes.
    for name, shape, dims in (("fsdp2", (world,), ("shard",)),
                              ("hsdp", (world // 2, 2), ("replicate", "shard"))):
        model = build()
        mesh = dist.init_device_mesh("tpu", shape, mesh_dim_names=dims)
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        assert all(p.device == device for p in model.parameters())
        losses = train(model, shard)
        check(name, model, losses,
              lambda m: [(n, p.full_tensor()) for n, p in m.named_parameters()])
elif mode in ("kill", "hang"):
    x = torch.ones(4, device=device)
    dist.all_reduce(x)
    dist.barrier()
    if node == int(sys.argv[2]):
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(TIMEOUT_S + 2)  # alive, connections open, but never reaching the collective
        # Failed, as a frozen node's job does: a node that succeeds would wait in torchrun's exit
        # barrier (5 minutes) for the failed other node.
        os._exit(1)
    start = time.monotonic()

    def collective():
        dist.all_reduce(x)
        x.cpu()

    exit_with_outcome(rank, start, collective)

fallbacks = torch_tpu.metrics()["fallback_ops"]
say(f"rank {rank}: fallback ops: {dict(sorted(fallbacks.items()))}")
dist.destroy_process_group()
