"""Checks shared by the examples: CPU and tpu training runs agree and the loss goes down; throughput."""

from __future__ import annotations

import math
import time


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


def throughput(start: float, timings: list[float], batch: int) -> str:
    """Samples per second over all steps, and over the steps after the first (which compiles)."""
    overall = batch * len(timings) / (timings[-1] - start)
    text = f"{overall:.1f} samples/s"
    if len(timings) > 1:
        text += f" ({batch * (len(timings) - 1) / (timings[-1] - timings[0]):.1f} samples/s after step 1)"
    return text


def add_common_arguments(parser, batch: int) -> None:
    """The options every example takes: steps, seed, batch size, one device only, no checks."""
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--device-only", choices=["tpu", "cpu"], help="run on this device only")
    parser.add_argument("--no-check", action="store_true", help="print, do not assert")


def run_devices(train_model, args, what: str = "steps", **config) -> dict[str, list[float]]:
    """Train with `train_model(device, steps, seed, timings=..., batch=..., **config)` on CPU and
    tpu (or `args.device_only`), print time and throughput per device, assert the tpu run used no
    CPU fallback and (unless --no-check) that the losses went down and agree; return the losses."""
    import torch_tpu

    results = {}
    for device in ["cpu", "tpu"]:
        if args.device_only and device != args.device_only:
            continue
        if device == "tpu":
            torch_tpu.reset_metrics()
        timings: list[float] = []
        start = time.perf_counter()
        _, results[device] = train_model(device, args.steps, args.seed, timings=timings, batch=args.batch,
                                         **config)
        print(f"{device}: {args.steps} {what} in {timings[-1] - start:.2f} s, "
              f"{throughput(start, timings, args.batch)}")
        if device == "tpu":
            fallbacks = torch_tpu.metrics()["fallback_ops"]
            print("tpu CPU fallbacks:", fallbacks or "none")
            if not args.no_check:
                assert not fallbacks, f"ops ran on the CPU fallback: {fallbacks}"
    report(results, args.steps, check=not args.no_check)
    if not args.no_check and len(results) == 2:
        print("cpu and tpu losses match")
    return results


def optimize(optimizer, loss, losses: list[float], timings: list[float] | None) -> None:
    """One training step from `loss`: backward and update; records the loss (reading it back,
    which waits for the device) and, with `timings`, the wall time the step ended."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if timings is not None:
        timings.append(time.perf_counter())
