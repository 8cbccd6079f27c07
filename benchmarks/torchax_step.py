"""The torchax peer of benchmarks/compile.py: the same torch training step, whole, in one jax.jit.

    .venv/bin/python benchmarks/torchax_step.py --workload mingpt [--number 5] [--repeats 3]

torchax (PyPI `torchax`, installed on first use into the venv without dependencies: it needs
only torch, jax and optax, which setup installs) runs PyTorch models on JAX arrays. The model is
the one benchmarks/train_step.py builds (examples/mingpt.py, examples/resnet.py, or
benchmarks/models.py's residual MLP), turned into a JAX function by `torchax.extract_jax`; the
step is forward + loss + `jax.value_and_grad` + optax AdamW (torch's AdamW defaults: betas 0.9,
0.999, eps 1e-8, weight decay 0.01), jitted as one program on JAX's CPU client (the same XLA CPU
compiler the tpu plugin uses). Prints one JSON line: first step seconds (tracing and compiling
included) and the median step in seconds. compile.py runs it in a subprocess of its own: torchax
names PyTorch's PrivateUse1 backend "jax" on import, which torch_tpu names "tpu", so torch_tpu
is kept out of this process (TORCH_DEVICE_BACKEND_AUTOLOAD=0, set here before torch loads).

torchax 0.0.13 (its latest release) names ATen overloads that torch 2.13 removed (the
named-tensor forms `prod.dim_Dimname`, `index_copy.dimname`, ...) in its tables at import and when
it builds its environment; they are stood in for meanwhile, and nothing here uses them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TORCHAX = "torchax==0.0.13"


def ensure_torchax() -> None:
    try:
        import importlib.util

        if importlib.util.find_spec("torchax") is not None:
            return
    except ImportError:
        pass
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", TORCHAX])


def import_torchax():
    import torch._ops as ops

    original = ops.OpOverloadPacket.__getattr__
    stood_in = []

    def lenient(packet, name):
        try:
            return original(packet, name)
        except AttributeError:
            if name.startswith("__") or not ("dimname" in name.lower() or "names" in name):
                raise
            stood_in.append(f"{packet._qualified_op_name}.{name}")
            return object()

    ops.OpOverloadPacket.__getattr__ = lenient
    try:
        import torchax

        torchax.default_env()  # loads its op tables, which name more of them
    finally:
        ops.OpOverloadPacket.__getattr__ = original
    return torchax


def build(workload: str, args):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    if workload == "mingpt":
        import mingpt

        model = mingpt.build(0, block=args.block, dim=args.dim)
        x, y = mingpt.make_batches(1, args.batch, args.block, 0)[0]
        return model, 3e-3, (x, y), None  # the model returns (logits, loss)
    if workload == "resnet":
        import resnet

        model = resnet.build(0, width=args.width, blocks=args.blocks)
        x, y = resnet.make_batches(1, args.batch, 0)[0]
        return model, 2e-3, (x,), y
    if workload == "mlp":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import models

        return models.residual_mlp(0), 1e-3, (models.residual_mlp_batch(0),), None
    raise SystemExit(f"unknown workload {workload}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=["mingpt", "resnet", "mlp"], required=True)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--blocks", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--number", type=int, default=5)
    args = parser.parse_args()
    ensure_torchax()
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import torch

    torchax = import_torchax()
    import jax
    import jax.numpy as jnp
    import optax

    model, lr, inputs, target = build(args.workload, args)
    model.train()
    states, forward = torchax.extract_jax(model)
    env = torchax.default_env()
    inputs = env.t2j_copy(inputs)
    labels = env.t2j_copy(target) if isinstance(target, torch.Tensor) else None
    trainable = {name for name, _ in model.named_parameters()}
    params = {k: v for k, v in states.items() if k in trainable}
    buffers = {k: v for k, v in states.items() if k not in trainable}

    def loss_fn(params, buffers, inputs, labels):
        out = forward({**params, **buffers}, inputs)
        if args.workload == "mingpt":
            return out[1]
        if args.workload == "resnet":
            return optax.softmax_cross_entropy_with_integer_labels(out, labels).mean()
        return jnp.mean(jnp.square(out))  # models.residual_mlp_loss

    optimizer = optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)

    @jax.jit
    def step(params, opt_state, buffers, inputs, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, buffers, inputs, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    state = {"params": params, "opt": optimizer.init(params)}

    def run():
        state["params"], state["opt"], state["loss"] = step(state["params"], state["opt"],
                                                             buffers, inputs, labels)

    def sync():
        jax.block_until_ready(state["loss"])

    start = time.perf_counter()
    run()
    sync()
    first = time.perf_counter() - start
    for _ in range(args.warmup):
        run()
    sync()
    runs = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.number):
            run()
        sync()
        runs.append((time.perf_counter() - start) / args.number)
    runs.sort()
    print(json.dumps({"workload": args.workload, "first_s": first,
                      "step_s": runs[len(runs) // 2], "loss": float(state["loss"])}))


if __name__ == "__main__":
    main()
