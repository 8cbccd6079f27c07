"""Sequences that grow by a step per call, shared by the growing-shape tests of every mode."""

import torch


def divide_by_a_shrinking_divisor(device):
    """Integer division of growing tensors whose divisor's newest element reaches 0 at step 8
    (padding the bucketed programs with anything but real elements would divide by 0 earlier):
    the quotients before that step and the error."""
    numerator = torch.arange(1, 4, device=device)
    divisor = torch.tensor([11, 10, 9], device=device)
    quotients = []
    try:
        for _ in range(12):
            numerator = torch.cat([numerator, numerator[-1:] + 1])
            divisor = torch.cat([divisor, divisor[-1:] - 1])
            quotients.append(torch.div(numerator, divisor, rounding_mode="floor").cpu())
    except RuntimeError as error:
        return quotients, str(error).split("\n")[0]
    return quotients, None


def hf_decoder_pair(transformers, kind):
    """Two small HF causal LMs (GPT-2 or Llama, random weights) with the same weights."""
    special = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128,
                                         n_positions=256, **special)
        cls = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=32,
                                          intermediate_size=64, num_attention_heads=4,
                                          num_key_value_heads=2, vocab_size=128,
                                          max_position_embeddings=256, **special)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    cpu_model = cls(config).eval()
    tpu_model = cls(config).eval()
    tpu_model.load_state_dict(cpu_model.state_dict())
    return cpu_model, tpu_model
