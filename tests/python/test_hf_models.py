"""HuggingFace transformers' Llama and Qwen2 causal LMs (tiny configs, random weights) train and
generate on tpu exactly as on CPU, with no op on the CPU fallback.

transformers is a test dependency (pyproject's `test` extra, installed by `make setup`), imported
unconditionally: a missing install fails here rather than skipping the check."""

import pytest
import torch
import transformers

import torch_tpu

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)
FAMILIES = {
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL)),
    # Qwen2: biases on q/k/v and its own RoPE base and RMSNorm epsilon (the config's defaults).
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL)),
}
STEPS = 3


def build(family: str, device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return FAMILIES[family]().to(device)  # identical weights on both devices


def batches() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, SMALL["vocab_size"], (2, 16), generator=generator) for _ in range(STEPS)]


def train(family: str, device: str) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """AdamW steps on `device`: each step's loss, and the last step's gradients (on CPU)."""
    model = build(family, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    losses = []
    for ids in batches():
        ids = ids.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    return losses, {name: p.grad.cpu() for name, p in model.named_parameters()}


def greedy(family: str, device: str, padded: bool) -> torch.Tensor:
    """generate(max_new_tokens=8), greedy, for two prompts; `padded`: the second is two tokens
    shorter, left-padded (the attention mask then hides the padding from attention and shifts
    its positions)."""
    model = build(family, device).eval()
    prompt = torch.randint(0, SMALL["vocab_size"], (2, 5), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(prompt)
    if padded:
        prompt[1, :2], mask[1, :2] = 0, 0
    with torch.no_grad():
        out = model.generate(prompt.to(device), attention_mask=mask.to(device), max_new_tokens=8,
                             do_sample=False, pad_token_id=0)
    return out.cpu()


@pytest.mark.parametrize("family", FAMILIES)
def test_training_matches_cpu_without_fallback(family):
    cpu_losses, cpu_grads = train(family, "cpu")
    torch_tpu.reset_metrics()
    tpu_losses, tpu_grads = train(family, "tpu")
    assert torch_tpu.metrics()["fallback_ops"] == {}
    # float32 on both; XLA orders reductions and matmuls differently (~1e-6 relative per step),
    # which AdamW's division by sqrt(v) amplifies over the steps.
    torch.testing.assert_close(torch.stack(tpu_losses), torch.stack(cpu_losses), rtol=1e-4, atol=1e-5)
    assert tpu_grads.keys() == cpu_grads.keys()
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(tpu_grads[name], grad, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("padded", [False, True], ids=["full", "left_padded"])
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_matches_cpu_without_fallback(family, padded):
    expected = greedy(family, "cpu", padded)
    torch_tpu.reset_metrics()
    tokens = greedy(family, "tpu", padded)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert tokens.shape == (2, 5 + 8)
    assert torch.equal(tokens, expected)


@pytest.mark.strict_mode
def test_gpt2_generation_compiles_per_bucket_not_per_new_length():
    """HF GPT-2's dynamic KV cache grows every token. Once a few tokens have shown each op's
    growing line, new lengths share bucketed programs (docs/cache.md, Growing sequences): 20
    lengths not seen before (10 to 29) compile only at the crossing into bucket 32."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    model = transformers.GPT2LMHeadModel(config).eval()
    prompt = torch.randint(1, 64, (1, 5), generator=torch.Generator().manual_seed(0))

    def generate(m, ids, tokens):
        return m.generate(ids, max_new_tokens=tokens, do_sample=False, pad_token_id=0,
                          eos_token_id=None)

    expected = generate(model, prompt, 24)
    model.to("tpu")
    generate(model, prompt.to("tpu"), 4)
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    tokens = generate(model, prompt.to("tpu"), 24).cpu()
    assert torch.equal(tokens, expected)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    # Measured: 16 (a bucket crossing costs about two programs per growing op); exact-shape
    # programs cost 9 per new length.
    assert torch_tpu.metrics()["compile_count"] <= 20
