"""Run under `accelerate launch --multi_gpu --num_processes 2` (or torchrun): Hugging Face
accelerate's data-parallel training on tpu_dist matches single-process PyTorch CPU training.

The script is what a user writes: the one line of setup (`import torch_tpu.integrations.accelerate`),
then `Accelerator().prepare(model, optimizer, dataloader)`. Each rank checks that accelerate runs it
as a tpu_dist rank (backend, process group, its own tpu device, DDP), that the dataloader hands it
its half of each global batch on tpu, that the losses averaged over the ranks equal CPU training on
the whole batch, and that nothing ran on the CPU fallback.
"""

import os

import torch
import torch.distributed as dist

import torch_tpu
import torch_tpu.integrations.accelerate  # noqa: F401  (the one line of setup)
from accelerate import Accelerator
from accelerate.utils import DistributedType

STEPS = 4
BATCH = 8  # global batch; each of the 2 ranks gets 4 rows of it
LR = 1e-2


def data():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(STEPS * BATCH, 8, generator=generator)
    return torch.utils.data.TensorDataset(inputs, inputs.sum(1, keepdim=True).sin())


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)


def reference_losses():
    """Single-process PyTorch CPU training on the whole global batch."""
    model, optimizer = build()
    losses = []
    for x, y in torch.utils.data.DataLoader(data(), batch_size=BATCH):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    reference = reference_losses()
    torch_tpu.reset_metrics()
    accelerator = Accelerator()
    rank, world = accelerator.process_index, accelerator.num_processes
    assert world == 2 == int(os.environ["WORLD_SIZE"]), (world, os.environ["WORLD_SIZE"])
    assert rank == int(os.environ["RANK"])
    assert accelerator.distributed_type == DistributedType.MULTI_GPU, accelerator.distributed_type
    assert accelerator.state.backend == "tpu_dist", accelerator.state.backend
    assert dist.is_initialized() and dist.get_backend() == "tpu_dist", dist.get_backend()
    assert accelerator.device == torch.device("tpu", accelerator.local_process_index), accelerator.device
    assert torch.tpu.current_device() == accelerator.device.index

    model, optimizer = build()
    loader = torch.utils.data.DataLoader(data(), batch_size=BATCH // world)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel), type(model)
    assert all(p.device == accelerator.device for p in model.parameters())
    expected_rows = data().tensors[0].reshape(STEPS, world, BATCH // world, 8)[:, rank]
    losses = []
    for step, (x, y) in enumerate(loader):
        assert x.device == accelerator.device and y.device == accelerator.device, (x.device, y.device)
        torch.testing.assert_close(x.cpu(), expected_rows[step], rtol=0, atol=0)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        losses.append(accelerator.reduce(loss.detach(), reduction="mean").item())
    assert len(losses) == STEPS, losses
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference), rtol=2e-4, atol=2e-5)
    gathered = accelerator.gather(torch.tensor([rank], device=accelerator.device))
    assert gathered.cpu().tolist() == list(range(world)), gathered
    accelerator.wait_for_everyone()
    fallback = torch_tpu.metrics().get("fallback_ops", {})
    assert fallback == {}, fallback
    print(f"rank {rank}: accelerate on {accelerator.device} over {dist.get_backend()}: losses "
          f"{[round(v, 6) for v in losses]} match single-process CPU training, no CPU fallback",
          flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
