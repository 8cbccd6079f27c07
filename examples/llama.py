"""A small Llama-style language model trained on a tiny character task, on CPU and on `tpu` from the same seed, then greedy generation with a KV cache.

    .venv/bin/python examples/llama.py [--steps 20] [--activations keep|checkpoint|offload] [--attention sdpa|tokamax] [--device-only tpu] [--no-check]

The model: token embeddings, pre-RMSNorm decoder blocks of grouped-query attention (fewer key/value
heads than query heads, rotary position embeddings on queries and keys, causal
F.scaled_dot_product_attention) and a SwiGLU MLP (down(silu(gate(x)) * up(x))), a final RMSNorm and
a linear head. `examples/qwen.py` is the same architecture with Qwen2's choices (biases on the
query/key/value projections, its RoPE base, a tied head).

Both runs start from identical weights (built on CPU, then moved) and see identical batches, so
their per-step losses must agree; the script checks that, that the loss went down and that the tpu
run used no CPU fallback, prints training throughput in tokens/s, then continues a prompt greedily
on each device with a preallocated KV cache and checks that both devices produce the same tokens.

`--activations checkpoint` recomputes each block's activations in backward
(torch.utils.checkpoint, non-reentrant); `--activations offload` keeps the tensors autograd saves
in (pinned) host memory until backward (torch.autograd.graph.save_on_cpu).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

import torch_tpu  # noqa: F401  (registers the tpu device)
from parity import (add_common_arguments, character_batches, check_parity, init_weights,  # noqa: F401
                    optimize, run_devices)  # (check_parity: used by tests)

TEXT = (
    "a llama reads the text one token at a time. "
    "rotary embeddings turn positions into angles. "
    "few key heads serve many query heads. "
)
VOCAB = sorted(set(TEXT))

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, kernel=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.kernel = kernel  # a fused op for tpu tensors (examples/pallas_kernel.py's rms_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None and x.device.type == "tpu":
            return self.kernel(x, self.weight, eps=self.eps)
        # The mean of squares in float32 whatever the activations' dtype: in bf16 it loses the
        # precision the normalisation depends on.
        normalized = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normalized.to(x.dtype)


def rotary(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (positions, head_dim) of each position's angles: pair i of a head turns by
    position / theta^(2i / head_dim). Computed on the positions' device from a positions tensor,
    so decoding step after step runs the same programs."""
    exponents = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    angles = positions.float()[:, None] / theta**exponents
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x[i], x[i + head_dim / 2]) of x (batch, heads, length, head_dim)."""
    half = x.size(-1) // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class KVCache:
    """Keys and values of every layer for `length` positions, preallocated so that their shapes
    (and the programs that read and write them) stay the same at every decoding step: a step
    writes its positions with index_copy_ and attends to the positions written so far through a
    mask, both from device tensors, so decoding never waits for the host."""

    def __init__(self, layers: int, batch: int, kv_heads: int, length: int, head_dim: int,
                 device: torch.device, dtype: torch.dtype):
        shape = (batch, kv_heads, length, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.slots = torch.arange(length, device=device)

    def update(self, layer: int, positions: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Write k, v (batch, kv_heads, len(positions), head_dim) at `positions`; return all keys,
        all values and the (len(positions), length) mask of the slots each position may see."""
        self.keys[layer].index_copy_(2, positions, k)
        self.values[layer].index_copy_(2, positions, v)
        return self.keys[layer], self.values[layer], self.slots[None, :] <= positions[:, None]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, qkv_bias: bool, kernel: str = "sdpa"):
        super().__init__()
        self.kernel = kernel
        assert heads % kv_heads == 0, "query heads must be a multiple of key/value heads"
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, heads * self.head_dim, bias=qkv_bias)
        self.k = nn.Linear(dim, kv_heads * self.head_dim, bias=qkv_bias)
        self.v = nn.Linear(dim, kv_heads * self.head_dim, bias=qkv_bias)
        self.o = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None = None,
                layer: int = 0, positions: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        mask = None
        if cache is not None:
            k, v, mask = cache.update(layer, positions, k, v)
        if self.kernel == "tokamax" and cache is None and x.device.type == "tpu":
            # Tokamax's attention kernel (torch_tpu.kernels); decoding with a cache keeps SDPA,
            # whose mask argument it needs.
            from torch_tpu import kernels

            out = kernels.dot_product_attention(q, k, v, is_causal=True)
        else:
            # enable_gqa: each group of heads // kv_heads query heads attends with one key/value head.
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=cache is None, enable_gqa=True)
        return self.o(out.transpose(1, 2).reshape(batch, length, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int, eps: float, qkv_bias: bool,
                 attention: str = "sdpa", norm_kernel=None):
        super().__init__()
        self.attention_norm = RMSNorm(dim, eps, norm_kernel)
        self.attention = Attention(dim, heads, kv_heads, qkv_bias, attention)
        self.mlp_norm = RMSNorm(dim, eps, norm_kernel)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None = None,
                layer: int = 0, positions: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, cache, layer, positions)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """Llama 3's choices by default (RoPE base 500000, RMSNorm epsilon 1e-5, no biases, untied
    head); examples/qwen.py passes Qwen2's. On tpu, `attention="tokamax"` runs Tokamax's attention
    kernel instead of SDPA and `norm="pallas"` the Pallas RMSNorm of examples/pallas_kernel.py
    (both need torch_tpu[kernels]); CPU always runs the PyTorch reference."""

    def __init__(self, vocab: int, dim: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                 hidden: int = 176, theta: float = 500000.0, eps: float = 1e-5, qkv_bias: bool = False,
                 tied: bool = False, attention: str = "sdpa", norm: str = "torch"):
        super().__init__()
        if attention not in ("sdpa", "tokamax") or norm not in ("torch", "pallas"):
            raise ValueError(f"attention must be sdpa or tokamax, norm torch or pallas; got {attention!r}, {norm!r}")
        norm_kernel = None
        if norm == "pallas":
            from pallas_kernel import rms_norm as norm_kernel
        self.theta, self.heads, self.kv_heads, self.head_dim = theta, heads, kv_heads, dim // heads
        self.embedding = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads, hidden, eps, qkv_bias, attention, norm_kernel)
                                    for _ in range(layers))
        self.norm = RMSNorm(dim, eps, norm_kernel)
        # Tied: the head reuses the embedding matrix through F.linear, not a Parameter shared by two
        # modules, which Module.to("tpu") would untie (see examples/mingpt.py).
        self.head = None if tied else nn.Linear(dim, vocab, bias=False)
        self.checkpointed = False
        self.apply(init_weights)

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (batch, length, vocab). Without a cache the tokens are positions 0.. and attend
        causally; with one, they are at `positions` and see what the cache holds up to theirs."""
        if positions is None:
            positions = torch.arange(tokens.size(1), device=tokens.device)
        cos, sin = rotary(positions, self.head_dim, self.theta)
        x = self.embedding(tokens)
        for layer, block in enumerate(self.blocks):
            if self.checkpointed and cache is None and torch.is_grad_enabled():
                # Keeps only each block's input; backward runs the block again for the rest.
                x = checkpoint(block, x, cos, sin, use_reentrant=False)
            else:
                x = block(x, cos, sin, cache, layer, positions)
        x = self.norm(x)
        return F.linear(x, self.embedding.weight) if self.head is None else self.head(x)


def make_batches(steps: int, batch: int, block: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` (input, target) batches of `block` characters from TEXT, drawn on CPU from `seed`."""
    return character_batches(TEXT, steps, batch, block, seed)


def encode(text: str) -> torch.Tensor:
    return torch.tensor([VOCAB.index(c) for c in text], dtype=torch.long)


def build(seed: int, **config) -> Llama:
    torch.manual_seed(seed)
    return Llama(len(VOCAB), **config)


def train(device: str | torch.device = "tpu", steps: int = 20, seed: int = 0, **options) -> list[float]:
    """Train for `steps` AdamW steps on `device`; return the per-step losses (floats)."""
    return train_model(device, steps, seed, **options)[1]


def train_model(device: str | torch.device = "tpu", steps: int = 20, seed: int = 0, *, batch: int = 8,
                block: int = 32, lr: float = 3e-3, activations: str = "keep",
                timings: list[float] | None = None, **config) -> tuple[Llama, list[float]]:
    """Train for `steps` AdamW steps on `device`; return the model and the per-step losses.
    `activations`: "keep" (autograd keeps what it saves on the device), "checkpoint" (recompute
    each block in backward) or "offload" (saved tensors wait in pinned host memory). `config`
    sets the architecture (Llama's arguments). `timings`, when given, receives the wall time at
    the end of each step (losses read back)."""
    if activations not in ("keep", "checkpoint", "offload"):
        raise ValueError(f"unknown activations {activations!r} (keep, checkpoint or offload)")
    device = torch.device(device)
    model = build(seed, **config).to(device)  # identical weights everywhere
    model.checkpointed = activations == "checkpoint"
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    for x, y in make_batches(steps, batch, block, seed):
        x, y = x.to(device), y.to(device)
        # device_type names the device whose availability decides whether host copies are pinned.
        saving = (torch.autograd.graph.save_on_cpu(pin_memory=True, device_type=device.type)
                  if activations == "offload" else contextlib.nullcontext())
        with saving:
            logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        optimize(optimizer, loss, losses, timings)
    return model, losses


@torch.no_grad()
def generate(model: Llama, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy continuation (batch, new_tokens) of `prompt` (batch, length) on the model's device:
    one pass over the prompt fills the KV cache, then each step feeds the last chosen token alone.
    Tokens stay on the device until the end, so the host never waits between steps."""
    device = next(model.parameters()).device
    prompt = prompt.to(device)
    batch, length = prompt.shape
    cache = KVCache(len(model.blocks), batch, model.kv_heads, length + new_tokens, model.head_dim, device,
                    model.embedding.weight.dtype)
    positions = torch.arange(length, device=device)
    tokens, chosen = prompt, []
    for _ in range(new_tokens):
        logits = model(tokens, cache, positions)
        tokens = logits[:, -1].argmax(dim=-1, keepdim=True)
        chosen.append(tokens)
        positions = positions[-1:] + 1
    return torch.cat(chosen, dim=1).cpu()


def continue_prompt(device: str, model: Llama, prompt: str = "a llama ", new_tokens: int = 24) -> list[int]:
    """Generate greedily from `prompt` twice, print the text and tokens/s of both runs (the first
    compiles the prefill and decoding programs; the second reuses them); return the token ids."""
    rates, results = [], []
    for _ in range(2):
        start = time.perf_counter()
        results.append(generate(model, encode(prompt)[None], new_tokens)[0].tolist())
        rates.append(new_tokens / (time.perf_counter() - start))
    assert results[0] == results[1], f"{device}: generation is not deterministic: {results}"
    print(f"{device}: generated {prompt!r} + {''.join(VOCAB[t] for t in results[0])!r} "
          f"({rates[0]:.1f} tokens/s, then {rates[1]:.1f} tokens/s)")
    return results[0]


def main(description: str = __doc__, architecture: dict | None = None) -> None:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, batch=8)
    parser.add_argument("--block", type=int, default=32, help="tokens per sequence")
    parser.add_argument("--activations", choices=["keep", "checkpoint", "offload"], default="keep")
    parser.add_argument("--attention", choices=["sdpa", "tokamax"], default="sdpa",
                        help="attention kernel on tpu (tokamax: torch_tpu.kernels, needs torch_tpu[kernels])")
    args = parser.parse_args()
    _, generated = run_devices(train_model, args, unit="tokens", per_sample=args.block, block=args.block,
                               activations=args.activations, after=continue_prompt,
                               **{**(architecture or {}), "attention": args.attention})
    if not args.no_check and len(generated) == 2:
        assert generated["cpu"] == generated["tpu"], f"generated tokens differ: {generated}"
        print("cpu and tpu generate the same tokens")


if __name__ == "__main__":
    main()
