"""examples/mingpt.py's GPT and its AdamW step written in JAX: the reference for what the same XLA
CPU compiler makes of this model when it sees the whole step at once (benchmarks/compile.py).

Weights come from the PyTorch model, so both start identical; `check_against_torch` verifies the
JAX step reproduces PyTorch's losses before anything is timed. JAX is a benchmark-only dependency:
`.venv/bin/pip install 'jax[cpu]'`.
"""

from __future__ import annotations

import math

import numpy as np


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as error:
        raise ImportError("the JAX reference needs jax: .venv/bin/pip install 'jax[cpu]'") from error
    jax.config.update("jax_platforms", "cpu")
    return jax, jnp


def params_from_torch(model) -> dict:
    return {name: np.asarray(value.detach().cpu().numpy())
            for name, value in model.state_dict().items()}


def make_step(config: dict, lr: float = 3e-3, betas=(0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 0.01):
    """A jitted (params, state, tokens, targets) -> (params, state, loss) AdamW training step."""
    jax, jnp = _jax()
    layers, heads = config["layers"], config["heads"]

    def layer_norm(x, p, name):
        mean = x.mean(-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(variance + 1e-5) * p[name + ".weight"] + p[name + ".bias"]

    def linear(x, p, name):
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    def loss_of(p, tokens, targets):
        batch, length = tokens.shape
        x = p["token_embedding.weight"][tokens] + p["position_embedding.weight"][:length]
        dim = x.shape[-1]
        causal = jnp.tril(jnp.ones((length, length), dtype=bool))
        for i in range(layers):
            block = f"blocks.{i}."
            h = linear(layer_norm(x, p, block + "norm1"), p, block + "attention.qkv")
            q, k, v = (t.reshape(batch, length, heads, dim // heads).transpose(0, 2, 1, 3)
                       for t in jnp.split(h, 3, axis=-1))
            scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(dim // heads))
            weights = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
            out = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, length, dim)
            x = x + linear(out, p, block + "attention.proj")
            h = jax.nn.gelu(linear(layer_norm(x, p, block + "norm2"), p, block + "mlp.0"),
                            approximate=False)
            x = x + linear(h, p, block + "mlp.2")
        logits = layer_norm(x, p, "norm") @ p["token_embedding.weight"].T
        log_probabilities = jax.nn.log_softmax(logits, axis=-1)
        picked = jnp.take_along_axis(log_probabilities, targets[..., None], axis=-1)
        return -picked.mean()

    def step(p, state, tokens, targets):
        loss, grads = jax.value_and_grad(loss_of)(p, tokens, targets)
        count = state["count"] + 1
        correction1 = 1 - betas[0] ** count
        correction2 = 1 - betas[1] ** count
        new_p, new_m, new_v = {}, {}, {}
        for name, value in p.items():
            g = grads[name]
            m = betas[0] * state["m"][name] + (1 - betas[0]) * g
            v = betas[1] * state["v"][name] + (1 - betas[1]) * g * g
            decayed = value * (1 - lr * weight_decay)
            denominator = jnp.sqrt(v) / jnp.sqrt(correction2) + eps
            new_p[name], new_m[name], new_v[name] = (decayed - (lr / correction1) * m / denominator,
                                                      m, v)
        return new_p, {"count": count, "m": new_m, "v": new_v}, loss

    return jax.jit(step, donate_argnums=(0, 1))


def initial_state(params: dict) -> dict:
    _, jnp = _jax()
    zeros = {name: jnp.zeros_like(value) for name, value in params.items()}
    return {"count": jnp.zeros((), jnp.float32), "m": zeros,
            "v": {name: jnp.zeros_like(value) for name, value in params.items()}}


def check_against_torch(model, optimizer_lr: float, tokens, targets, config: dict,
                        steps: int = 3) -> None:
    """Raises unless the JAX step reproduces PyTorch CPU's losses for `steps` steps."""
    import copy

    import torch

    _, jnp = _jax()
    reference = copy.deepcopy(model).cpu()
    optimizer = torch.optim.AdamW(reference.parameters(), lr=optimizer_lr)
    torch_losses = []
    for _ in range(steps):
        _, loss = reference(tokens, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch_losses.append(loss.item())
    step = make_step(config, lr=optimizer_lr)
    params = {k: jnp.asarray(v) for k, v in params_from_torch(model).items()}
    state = initial_state(params)
    jax_losses = []
    x, y = jnp.asarray(tokens.numpy()), jnp.asarray(targets.numpy())
    for _ in range(steps):
        params, state, loss = step(params, state, x, y)
        jax_losses.append(float(loss))
    np.testing.assert_allclose(jax_losses, torch_losses, rtol=1e-4)
