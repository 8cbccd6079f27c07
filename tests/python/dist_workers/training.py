"""Run under torchrun: data-parallel training on tpu_dist matches single-process training.

    torchrun --nproc-per-node=2 tests/python/dist_workers/training.py ddp tp simplefsdp fsdp2 [dcp DIR]
    torchrun --nproc-per-node=1 tests/python/dist_workers/training.py resume DIR

minGPT (examples/mingpt.py) trains for a few AdamW steps on a global batch that each rank
splits; the loss averaged over ranks must match the loss of single-process PyTorch CPU training
on the whole batch (``tp``: DTensor tensor parallelism, every rank on the whole batch; ``simplefsdp``: torchtitan's SimpleFSDP under
torch.compile(backend="tpu")). With
``dcp DIR`` the FSDP2 run also saves a sharded checkpoint
(torch.distributed.checkpoint) after the first half of the steps, trains on, then a fresh model
loads it and must continue with the same losses; the continuation losses go to DIR/losses.json
for a run with another world size (``resume DIR``), which loads the checkpoint resharded and
must continue with those losses.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
import mingpt  # noqa: E402

STEPS = 4
CONFIG = dict(block=16, layers=2, heads=2, dim=32)
BATCH = 8
LR = 3e-3

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
torch.tpu.set_device(local_rank)
device = torch.device("tpu", local_rank)
dist.init_process_group("tpu_dist")
batches = mingpt.make_batches(STEPS, BATCH, CONFIG["block"], seed=0)


def shard(tensor):
    per_rank = tensor.shape[0] // world
    return tensor[rank * per_rank:(rank + 1) * per_rank]


def reference_losses():
    """Single-process PyTorch CPU training on the whole batch."""
    model = mingpt.build(0, **CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    losses = []
    for x, y in batches:
        mingpt.optimize(optimizer, model(x, y)[1], losses, None)
    return losses


def step(model, optimizer, x, y):
    _, loss = model(shard(x).to(device), shard(y).to(device))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    loss = loss.detach()
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    return loss.item()


def check(name, losses, expected, what="single-process training"):
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=2e-4, atol=2e-4)
    if rank == 0:
        print(f"{name}: losses {[round(v, 5) for v in losses]} match {what}", flush=True)


def ddp():
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(mingpt.build(0, **CONFIG).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    check("ddp", [step(model, optimizer, x, y) for x, y in batches], reference)


def fsdp2_model():
    from torch.distributed.fsdp import fully_shard

    model = mingpt.build(0, **CONFIG)
    mesh = dist.init_device_mesh("tpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)


def fsdp2(checkpoint_dir=None):
    model, optimizer = fsdp2_model()
    losses = []
    for index, (x, y) in enumerate(batches):
        if checkpoint_dir is not None and index == STEPS // 2:
            save(model, optimizer, checkpoint_dir)
        losses.append(step(model, optimizer, x, y))
    check("fsdp2", losses, reference)
    assert all(p.device == device for p in model.parameters())
    if checkpoint_dir is not None:
        fresh, fresh_optimizer = fsdp2_model()
        load(fresh, fresh_optimizer, checkpoint_dir)
        resumed = [step(fresh, fresh_optimizer, x, y) for x, y in batches[STEPS // 2:]]
        torch.testing.assert_close(torch.tensor(resumed), torch.tensor(losses[STEPS // 2:]),
                                   rtol=0, atol=0)
        if rank == 0:
            print(f"dcp: resumed losses {[round(v, 5) for v in resumed]} equal the run's own",
                  flush=True)
            with open(os.path.join(checkpoint_dir, "losses.json"), "w") as file:
                json.dump(losses[STEPS // 2:], file)


def tensor_parallel():
    """DTensor tensor and sequence parallelism over the whole minGPT block (Megatron style): the
    attention's qkv and the MLP's first linear split by columns, the projections after them by
    rows; the LayerNorms sequence-parallel, so the residual stream between them is sharded along
    the sequence (all-gathered into each column-parallel linear, reduce-scattered out of each
    row-parallel one). Every rank sees the whole batch."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    model = mingpt.build(0, **CONFIG).to(device)
    mesh = dist.init_device_mesh("tpu", (world,))
    dim = CONFIG["dim"]
    # qkv's rows reordered so that rank r's block of rows is [q, k, v] of its own heads.
    rows = torch.cat([torch.arange(part * dim + r * dim // world, part * dim + (r + 1) * dim // world)
                      for r in range(world) for part in range(3)]).to(device)
    for block in model.blocks:
        with torch.no_grad():
            block.attention.qkv.weight.copy_(block.attention.qkv.weight[rows])
            block.attention.qkv.bias.copy_(block.attention.qkv.bias[rows])
        parallelize_module(block, mesh, {
            "norm1": SequenceParallel(),
            "attention.qkv": ColwiseParallel(input_layouts=Shard(1)),
            "attention.proj": RowwiseParallel(output_layouts=Shard(1)),
            "norm2": SequenceParallel(),
            "mlp.0": ColwiseParallel(input_layouts=Shard(1)),
            "mlp.2": RowwiseParallel(output_layouts=Shard(1)),
        })
    # The embeddings' sum enters the blocks split along the sequence; the final norm gets it whole.
    parallelize_module(model.blocks[0], mesh, PrepareModuleInput(
        input_layouts=Replicate(), desired_input_layouts=Shard(1), use_local_output=True))
    parallelize_module(model.norm, mesh, PrepareModuleInput(
        input_layouts=Shard(1), desired_input_layouts=Replicate(), use_local_output=True))
    assert type(model.blocks[0].attention.qkv.weight).__name__ == "DTensor"
    # foreach=False: one param group mixes DTensors (blocks) and plain tensors (the rest).
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01, foreach=False)
    losses = []
    for x, y in batches:
        _, loss = model(x.to(device), y.to(device))
        mingpt.optimize(optimizer, loss, losses, None)
    check("tensor+sequence parallel (DTensor, attention and MLP)", losses, reference)


def simple_fsdp():
    """SimpleFSDP (torchtitan's compiler-based FSDP): parameters are DTensors sharded on dim 0
    whose parametrization all-gathers them for compute (gradients reduce-scattered, averaged);
    the model is compiled with torch.compile(backend="tpu")."""
    import torch.nn.utils.parametrize as parametrize
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    class ReplicateComputation(torch.nn.Module):
        def forward(self, sharded):
            return sharded.redistribute(placements=(Replicate(),)).to_local(
                grad_placements=(Partial("avg"),))

    model = mingpt.build(0, **CONFIG).to(device)
    mesh = dist.init_device_mesh("tpu", (world,))
    for module in list(model.modules()):
        for name, parameter in list(module.named_parameters(recurse=False)):
            sharded = torch.nn.Parameter(distribute_tensor(parameter.data, mesh, [Shard(0)]))
            module.register_parameter(name, sharded)
            parametrize.register_parametrization(module, name, ReplicateComputation(),
                                                 unsafe=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    compiled = torch.compile(model, backend="tpu")
    check("simple_fsdp (torch.compile)",
          [step(compiled, optimizer, x, y) for x, y in batches], reference)


def save(model, optimizer, directory):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)


def load(model, optimizer, directory):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])


reference = reference_losses()
modes = sys.argv[1:]
if "ddp" in modes:
    ddp()
if "tp" in modes:
    tensor_parallel()
if "simplefsdp" in modes:
    simple_fsdp()
if "fsdp2" in modes:
    fsdp2(modes[modes.index("dcp") + 1] if "dcp" in modes else None)
if "resume" in modes:
    # A checkpoint saved by another world size: DCP reshards it on load.
    directory = modes[modes.index("resume") + 1]
    model, optimizer = fsdp2_model()
    load(model, optimizer, directory)
    with open(os.path.join(directory, "losses.json")) as file:
        expected = json.load(file)
    check(f"dcp resharded to {world} rank(s)",
          [step(model, optimizer, x, y) for x, y in batches[STEPS // 2:]], expected,
          "the saving run's")
fallbacks = torch_tpu.metrics()["fallback_ops"]
if rank == 0:
    print(f"fallback ops: {dict(sorted(fallbacks.items()))}", flush=True)
dist.destroy_process_group()
