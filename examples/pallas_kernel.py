"""A custom fused RMSNorm written in Pallas, used as a PyTorch op on tpu and inside the Llama example.

    .venv/bin/python examples/pallas_kernel.py [--steps 4] [--attention sdpa|tokamax]

The kernel normalizes a block of rows per grid step in float32 (one pass: mean of squares,
rsqrt, scale by the weight) and writes the input's dtype. torch.tpu.pallas.jax_op makes it an op:
traced by JAX once per shape, compiled into our own programs (Mosaic on a TPU, Pallas interpret
mode on the XLA CPU plugin: `interpret=torch.tpu.pallas.interpret()`). Its backward is a plain
JAX function (the RMSNorm gradient), so the op trains.

The script checks the op against examples/llama.py's RMSNorm (forward and backward), then trains
Llama on tpu with the kernel (`norm="pallas"`) and compares its losses with CPU's.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torch_tpu  # noqa: F401  (registers the tpu device and torch.tpu.pallas)


def _rms_norm_kernel(x_ref, w_ref, o_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    normalized = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    # Same rounding as examples/llama.py's RMSNorm: normalize in float32, round, then scale.
    o_ref[...] = w_ref[...] * normalized.astype(o_ref.dtype)


def _rms_norm_forward(x, weight, *, eps):
    rows = x.reshape(-1, x.shape[-1])
    block = 8 if rows.shape[0] % 8 == 0 else rows.shape[0]
    out = pl.pallas_call(
        lambda x_ref, w_ref, o_ref: _rms_norm_kernel(x_ref, w_ref, o_ref, eps=eps),
        out_shape=jax.ShapeDtypeStruct(rows.shape, jnp.result_type(x.dtype, weight.dtype)),
        grid=(rows.shape[0] // block,),
        in_specs=[pl.BlockSpec((block, rows.shape[1]), lambda i: (i, 0)),
                  pl.BlockSpec((rows.shape[1],), lambda i: (0,))],
        out_specs=pl.BlockSpec((block, rows.shape[1]), lambda i: (i, 0)),
        interpret=torch.tpu.pallas.interpret(),
    )(rows, weight)
    return out.reshape(x.shape[:-1] + out.shape[-1:])


def _rms_norm_backward(x, weight, grad, *, eps):
    # y = w * x * r with r = rsqrt(mean(x^2) + eps): dr/dx = -r^3 x / D.
    x32, g32 = x.astype(jnp.float32), grad.astype(jnp.float32)
    r = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    normalized = (x32 * r).astype(x.dtype).astype(jnp.float32)
    gw = g32 * weight.astype(jnp.float32)
    dx = r * gw - x32 * r**3 * jnp.mean(gw * x32, axis=-1, keepdims=True)
    dweight = (g32 * normalized).reshape(-1, x.shape[-1]).sum(0)
    return dx.astype(x.dtype), dweight.astype(weight.dtype)


rms_norm = torch.tpu.pallas.jax_op(_rms_norm_forward, name="pallas_rms_norm",
                                   backward=_rms_norm_backward)
rms_norm.__doc__ = "RMSNorm of x's last dimension scaled by weight: rms_norm(x, weight, eps=...)."


def check_against_llama(seed: int = 0) -> float:
    """Largest difference of the kernel's forward and gradients from examples/llama.py's RMSNorm
    on CPU."""
    import llama

    torch.manual_seed(seed)
    reference = llama.RMSNorm(32, 1e-5)
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 8, 32, requires_grad=True)
    expected = reference(x)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    tx = x.detach().to("tpu").requires_grad_()
    tw = reference.weight.detach().to("tpu").requires_grad_()
    result = rms_norm(tx, tw, eps=1e-5)
    result.backward(grad.to("tpu"))
    return max((result.detach().cpu() - expected.detach()).abs().max().item(),
               (tx.grad.cpu() - x.grad).abs().max().item(),
               (tw.grad.cpu() - reference.weight.grad).abs().max().item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--attention", choices=["sdpa", "tokamax"], default="sdpa")
    args = parser.parse_args()
    import llama

    difference = check_against_llama()
    print(f"pallas rms_norm vs llama.RMSNorm (forward and gradients): max difference "
          f"{difference:.2e}")
    assert difference < 1e-4
    config = dict(batch=4, block=16)
    _, cpu_losses = llama.train_model("cpu", args.steps, 0, **config)
    _, tpu_losses = llama.train_model("tpu", args.steps, 0, norm="pallas",
                                      attention=args.attention, **config)
    print("cpu losses:             ", " ".join(f"{loss:.4f}" for loss in cpu_losses))
    print(f"tpu losses (pallas norm, {args.attention}):", " ".join(f"{l:.4f}" for l in tpu_losses))
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-3,
                               atol=1e-3)
    print("losses agree")


if __name__ == "__main__":
    main()
