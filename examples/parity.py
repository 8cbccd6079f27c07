"""Checks shared by the examples: CPU and tpu training runs agree and the loss goes down; throughput."""

from __future__ import annotations

import math
import time

import torch


def check_parity(cpu: list[float], tpu: list[float]) -> None:
    """Per-step losses agree: rtol 1e-3 over the first 5 steps, 1e-2 up to step 10, 3e-2 after.

    Both runs compute in float32 but in different orders (XLA fuses and reorders reductions,
    matmuls and convolutions), so each step differs by ~1e-6 relative at first. AdamW divides by
    sqrt(v) + eps and BatchNorm by per-batch standard deviations, which amplify these differences;
    they compound through the weights, so the tolerance widens with the step count while still
    catching a wrong op (which is off by far more). Measured: ResNet agrees to ~1e-6 for 8 steps,
    then drifts to 1.1% by step 19 as the loss of the tiny fixed batch approaches zero.
    """
    for step, (c, t) in enumerate(zip(cpu, tpu)):
        rtol = 1e-3 if step < 5 else 1e-2 if step < 10 else 3e-2
        assert math.isclose(c, t, rel_tol=rtol, abs_tol=1e-5), f"step {step}: cpu {c:.6f} vs tpu {t:.6f}"


def report(results: dict[str, list[float]], steps: int, check: bool) -> None:
    """Print per-step losses per device; with `check`, assert they went down and agree."""
    print(f"{'step':>4}" + "".join(f"{d + ' loss':>14}" for d in results))
    for step in range(steps):
        print(f"{step:>4}" + "".join(f"{losses[step]:>14.6f}" for losses in results.values()))
    if not check:
        return
    for device, losses in results.items():
        assert losses[-1] < losses[0] * 0.8, f"{device}: loss did not go down ({losses[0]:.4f} -> {losses[-1]:.4f})"
    if len(results) == 2:
        check_parity(results["cpu"], results["tpu"])


def throughput(start: float, timings: list[float], batch: int, unit: str = "samples", per_sample: int = 1) -> str:
    """Items (samples, or `per_sample` `unit` per sample: tokens for language models) per second
    over all steps, and over the steps after the first (which compiles)."""
    items = batch * per_sample
    overall = items * len(timings) / (timings[-1] - start)
    text = f"{overall:.1f} {unit}/s"
    if len(timings) > 1:
        text += f" ({items * (len(timings) - 1) / (timings[-1] - timings[0]):.1f} {unit}/s after step 1)"
    return text


def add_common_arguments(parser, batch: int) -> None:
    """The options every example takes: steps, seed, batch size, one device only, no checks."""
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--device-only", choices=["tpu", "cpu"], help="run on this device only")
    parser.add_argument("--no-check", action="store_true", help="print, do not assert")


def run_devices(train_model, args, what: str = "steps", *, unit: str = "samples", per_sample: int = 1,
                after=None, **config) -> tuple[dict[str, list[float]], dict[str, object]]:
    """Train with `train_model(device, steps, seed, timings=..., batch=..., **config)` on CPU and
    tpu (or `args.device_only`), print time and throughput per device (in `unit`/s, `per_sample`
    of them per sample), assert the tpu run used no CPU fallback and (unless --no-check) that the
    losses went down and agree. `after(device, model)`, when given, runs on each trained model
    (evaluation, generation) before the fallback check, so that its ops count too. Return the
    losses and what `after` returned, each by device."""
    import torch_tpu

    results, outcomes = {}, {}
    for device in ["cpu", "tpu"]:
        if args.device_only and device != args.device_only:
            continue
        if device == "tpu":
            torch_tpu.reset_metrics()
        timings: list[float] = []
        start = time.perf_counter()
        model, results[device] = train_model(device, args.steps, args.seed, timings=timings, batch=args.batch,
                                             **config)
        print(f"{device}: {args.steps} {what} in {timings[-1] - start:.2f} s, "
              f"{throughput(start, timings, args.batch, unit, per_sample)}")
        if after is not None:
            outcomes[device] = after(device, model)
        if device == "tpu":
            fallbacks = torch_tpu.metrics()["fallback_ops"]
            print("tpu CPU fallbacks:", fallbacks or "none")
            if not args.no_check:
                assert not fallbacks, f"ops ran on the CPU fallback: {fallbacks}"
    report(results, args.steps, check=not args.no_check)
    if not args.no_check and len(results) == 2:
        print("cpu and tpu losses match")
    return results, outcomes


def character_batches(text: str, steps: int, batch: int, block: int,
                      seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` (input, target) batches of `block` characters of `text` (ids: indices into its
    sorted characters), the targets one character on, drawn on CPU from `seed`: the language
    model examples' data."""
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(c) for c in text * (1 + 2 * block // len(text))], dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - block - 1, (batch,), generator=generator).tolist()
        batches.append((torch.stack([data[s:s + block] for s in starts]),
                        torch.stack([data[s + 1:s + block + 1] for s in starts])))
    return batches


def init_weights(module: torch.nn.Module) -> None:
    """GPT-2's initialisation, which the language model examples apply to every module: weights of
    linear layers and embeddings from N(0, 0.02), biases zero."""
    if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
        torch.nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, torch.nn.Linear) and module.bias is not None:
        torch.nn.init.zeros_(module.bias)


def optimize(optimizer, loss, losses: list[float], timings: list[float] | None) -> None:
    """One training step from `loss`: backward and update; records the loss (reading it back,
    which waits for the device) and, with `timings`, the wall time the step ended."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if timings is not None:
        timings.append(time.perf_counter())
