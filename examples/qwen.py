"""A small Qwen2-style language model trained on a tiny character task, on CPU and on `tpu` from the same seed, then greedy generation with a KV cache.

    .venv/bin/python examples/qwen.py [--steps 20] [--activations keep|checkpoint|offload] [--attention sdpa|tokamax] [--device-only tpu] [--no-check]

Qwen2 is the Llama architecture of examples/llama.py (RMSNorm, rotary embeddings, grouped-query
causal attention, SwiGLU MLP) with its own choices, which this example sets: biases on the query,
key and value projections, a RoPE base of 1000000 (slower-turning angles, for long contexts), an
RMSNorm epsilon of 1e-6 and, as in the small Qwen2 models, a head tied to the token embedding.
The runs, checks and throughput are examples/llama.py's: CPU and tpu losses agree from one seed
with no CPU fallback, and greedy generation gives the same tokens on both.
"""

from __future__ import annotations

import llama
from llama import check_parity, generate  # noqa: F401  (used by tests)

QWEN2 = dict(theta=1000000.0, eps=1e-6, qkv_bias=True, tied=True)


def build(seed: int, **config) -> llama.Llama:
    return llama.build(seed, **{**QWEN2, **config})


def train(device="tpu", steps: int = 20, seed: int = 0, **options) -> list[float]:
    """Train for `steps` AdamW steps on `device`; return the per-step losses (floats)."""
    return train_model(device, steps, seed, **options)[1]


def train_model(device="tpu", steps: int = 20, seed: int = 0, **options) -> tuple[llama.Llama, list[float]]:
    """examples/llama.py's training with Qwen2's architecture; options as llama.train_model's."""
    return llama.train_model(device, steps, seed, **{**QWEN2, **options})


if __name__ == "__main__":
    llama.main(__doc__, QWEN2)
