"""Run under `accelerate launch --multi_gpu --num_processes 2` (or torchrun): Hugging Face
accelerate's and transformers.Trainer's data-parallel training on tpu_dist.

The script is what a user writes, with no line for tpu: `Accelerator().prepare(model, optimizer,
dataloader)` (accelerate is imported before torch, the order in which torch_tpu's setup of
accelerate must still happen). Each rank checks that accelerate runs it
as a tpu_dist rank (backend, process group, its own tpu device, DDP), that the dataloader hands it
its half of each global batch on tpu, that the losses averaged over the ranks equal CPU training on
the whole batch, and that nothing ran on the CPU fallback. Then a Trainer fine-tunes GPT-2
(hf_trainer_helpers.py) with each rank on half of the global batch and prints its logged losses
and gradient norms as JSON, which the test compares with single-process CPU training.
"""

import json
import os
import sys

from accelerate import Accelerator  # isort: skip  (before torch on purpose)
from accelerate.utils import DistributedType  # isort: skip
import torch
import torch.distributed as dist

import torch_tpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import hf_trainer_helpers  # noqa: E402

STEPS = 4
BATCH = 8  # global batch; each of the 2 ranks gets 4 rows of it
LR = 1e-2


def report_line(line: str) -> None:
    """`line` and its newline in one write. Both ranks write to the launcher's stdout, and the
    other rank's Trainer log once landed right after this line's text, before its newline (an
    unbuffered stdout gets print's text and newline as two writes)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


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


def accelerate_training():
    reference = reference_losses()
    torch_tpu.reset_metrics()
    accelerator = Accelerator()
    rank, world = accelerator.process_index, accelerator.num_processes
    assert world == 2 == int(os.environ["WORLD_SIZE"]), (world, os.environ["WORLD_SIZE"])
    assert rank == int(os.environ["RANK"])
    assert accelerator.distributed_type == DistributedType.MULTI_GPU, accelerator.distributed_type
    assert accelerator.state.backend == "tpu_dist", accelerator.state.backend
    assert dist.is_initialized() and dist.get_backend() == "tpu_dist", dist.get_backend()
    device = torch.device("tpu", accelerator.local_process_index)
    assert accelerator.device == device, accelerator.device
    assert torch.tpu.current_device() == accelerator.device.index

    model, optimizer = build()
    loader = torch.utils.data.DataLoader(data(), batch_size=BATCH // world)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert isinstance(model, torch.nn.parallel.DistributedDataParallel), type(model)
    assert all(p.device == accelerator.device for p in model.parameters())
    expected_rows = data().tensors[0].reshape(STEPS, world, BATCH // world, 8)[:, rank]
    losses = []
    for step, (x, y) in enumerate(loader):
        assert x.device == device and y.device == device, (x.device, y.device)
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
    report_line(f"rank {rank}: accelerate on {accelerator.device} over {dist.get_backend()}: "
                f"losses {[round(v, 6) for v in losses]} match single-process CPU training, "
                "no CPU fallback")


def trainer_training(output_dir):
    torch_tpu.reset_metrics()
    world = int(os.environ["WORLD_SIZE"])
    trainer, history = hf_trainer_helpers.trainer_run("gpt2", output_dir, cpu=False,
                                                      processes=world)
    args, rank = trainer.args, int(os.environ["RANK"])
    assert (args.parallel_mode.value, args.world_size) == ("distributed", world), \
        (args.parallel_mode, args.world_size)
    assert args.device == torch.device("tpu", rank), args.device
    assert isinstance(trainer.model_wrapped, torch.nn.parallel.DistributedDataParallel)
    assert next(trainer.model.parameters()).device == args.device
    fallback = torch_tpu.metrics().get("fallback_ops", {})
    assert fallback == {}, fallback
    rows = [[step, *history[step]] for step in sorted(history)]
    report_line(f"rank {rank}: trainer on {args.device}, no CPU fallback: {json.dumps(rows)}")


if __name__ == "__main__":
    accelerate_training()
    trainer_training(sys.argv[1])
    dist.destroy_process_group()
