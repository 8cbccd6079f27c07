"""torchtitan's Llama 3 debug model trains a few AdamW steps; prints the losses as JSON.

    python tests/python/dist_workers/torchtitan_llama3.py {tpu,cpu}
    torchrun --nproc-per-node=2 tests/python/dist_workers/torchtitan_llama3.py {tpu,cpu}

The model is torchtitan's own `debugmodel` flavour (torchtitan.models.llama3.llama3_configs:
dim 256, 6 layers, 16 heads, vocab 2048), built and initialised on the CPU with one seed, so every
run starts from the same weights. Under torchrun it is sharded with torchtitan's FSDP2 function
(`apply_fsdp_to_decoder`, what `parallelize_llama` applies for data parallelism) over a DeviceMesh
on tpu_dist (tpu) or Gloo (cpu); each rank trains on its share of the global batch, and the loss
printed is the sum over ranks of the loss of a rank's tokens divided by the global token count
(torchtitan's trainer scales it so, and its FSDP sums gradients), which equals the loss of one
process on the whole batch.

Attention: torchtitan 0.3.0 gives language models only flex/varlen attention (FlexAttention runs
under torch.compile with Inductor and Triton-tuned kernels). Without document masks (synthetic
sequences are one document each) that is causal attention, so the layers' `inner_attention` is
torchtitan's ScaledDotProductAttention (is_causal=True) instead.
"""

import dataclasses
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import torch_tpu  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torchtitan_compat  # noqa: E402

torchtitan_compat.make_torchtitan_importable()

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from torchtitan.distributed.fsdp import apply_fsdp_to_decoder  # noqa: E402
from torchtitan.models.common.attention import ScaledDotProductAttention  # noqa: E402
from torchtitan.models.llama3 import llama3_configs  # noqa: E402

STEPS = 3
BATCH = 4
SEQ = 32
LR = 8e-4


def build_model():
    config = llama3_configs["debugmodel"](attn_backend="flex")
    layers = []
    for layer in config.layers:
        attention = dataclasses.replace(
            layer.attention, inner_attention=ScaledDotProductAttention.Config(),
            rope=dataclasses.replace(layer.attention.rope, max_seq_len=SEQ))
        layers.append(dataclasses.replace(layer, attention=attention))
    config = dataclasses.replace(config, layers=layers)
    torch.manual_seed(0)
    model = config.build()
    with torch.no_grad():
        model.init_weights(buffer_device=torch.device("cpu"))
    return model, config.vocab_size


def main():
    device_type = sys.argv[1]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    model, vocab = build_model()
    if "WORLD_SIZE" in os.environ:
        if device_type == "tpu":
            torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("tpu_dist" if device_type == "tpu" else "gloo")
        mesh = init_device_mesh(device_type, (world,), mesh_dim_names=("fsdp",))
        apply_fsdp_to_decoder(model, mesh, param_dtype=torch.float32,
                              reduce_dtype=torch.float32, pp_enabled=False)
        if device_type == "cpu":
            # torchtitan turns FSDP's gradient division off (factor 1.0), which FSDP2 sends as
            # ReduceOp.PREMUL_SUM(1.0); Gloo has no PREMUL_SUM, tpu_dist has. A plain SUM is
            # the same reduction.
            for module in model.modules():
                if isinstance(module, FSDPModule):
                    module.set_force_sum_reduction_for_comms(True)
        device = mesh.device_type
    else:
        device = device_type
        model.to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    tokens = torch.randint(0, vocab, (STEPS, BATCH, SEQ + 1),
                           generator=torch.Generator().manual_seed(1))
    share = BATCH // world
    losses = []
    for step in range(STEPS):
        batch = tokens[step, rank * share:(rank + 1) * share].to(device)
        logits = model(batch[:, :-1])
        # As torchtitan's trainer: the loss is summed over this rank's tokens and divided by
        # the global token count, and FSDP sums (does not average) the ranks' gradients.
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten(),
                               reduction="sum") / (BATCH * SEQ)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss = loss.detach()
        if world > 1:
            dist.all_reduce(loss)
        losses.append(loss.item())
    if rank == 0:
        print("RESULT " + json.dumps({"losses": losses,
                                      "fallback_ops": torch_tpu.metrics()["fallback_ops"]}))
    if world > 1:
        # Both ranks leave their last collective before either tears its pairs down: the Gloo
        # reference run once aborted in teardown ("terminate called without an active
        # exception") after rank 0 had printed its result.
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
