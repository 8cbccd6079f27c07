"""nn.Module.to("tpu") and .cpu() keep Parameter objects, as on CUDA.

Tied weights stay tied, an optimizer built before the move updates the moved parameters, and
`param.data = other_device_tensor` works both ways.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


class TiedLM(nn.Module):
    """A tiny language model whose output head shares the token embedding (like GPT-2)."""

    def __init__(self, vocab=17, dim=8):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.hidden = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.hidden(self.embedding(tokens))))


def train(model, optimizer, device, steps=3):
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, 17, (4, 6), generator=generator)
        logits = model(tokens[:, :-1].to(device))
        loss = F.cross_entropy(logits.reshape(-1, 17), tokens[:, 1:].reshape(-1).to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def models():
    torch.manual_seed(0)
    cpu = TiedLM()
    tpu = TiedLM()
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu


def test_shallow_copy_compatibility_follows_cpu_rules():
    dense = torch.zeros(2)
    sparse = torch.zeros(2).to_sparse()
    on_tpu = torch.zeros(2, device="tpu")
    assert torch._has_compatible_shallow_copy_type(dense, on_tpu)
    assert torch._has_compatible_shallow_copy_type(on_tpu, dense)
    assert torch._has_compatible_shallow_copy_type(on_tpu, on_tpu)
    # dense <-> sparse answers as it does between CPU tensors
    expected = torch._has_compatible_shallow_copy_type(dense, sparse)
    assert torch._has_compatible_shallow_copy_type(on_tpu, sparse) == expected
    assert torch._has_compatible_shallow_copy_type(sparse, on_tpu) == expected


def test_to_tpu_keeps_parameter_identity_and_tying():
    _, model = models()
    parameters = list(model.parameters())
    assert model.to("tpu") is model
    assert list(model.parameters()) == parameters
    assert all(p.device.type == "tpu" and isinstance(p, nn.Parameter) for p in parameters)
    assert model.head.weight is model.embedding.weight


@pytest.mark.parametrize("optimizer_class", [torch.optim.SGD, torch.optim.AdamW])
def test_tied_model_trains_like_cpu_with_optimizer_made_before_the_move(optimizer_class):
    cpu_model, tpu_model = models()
    cpu_optimizer = optimizer_class(cpu_model.parameters(), lr=0.1)
    tpu_optimizer = optimizer_class(tpu_model.parameters(), lr=0.1)
    tpu_model.to("tpu")
    cpu_losses = train(cpu_model, cpu_optimizer, "cpu")
    tpu_losses = train(tpu_model, tpu_optimizer, "tpu")
    assert tpu_losses == pytest.approx(cpu_losses, rel=1e-5)
    # the optimizer's parameters are the model's: it updated the tpu tensors
    assert [p for group in tpu_optimizer.param_groups for p in group["params"]] == list(
        tpu_model.parameters())
    assert tpu_model.head.weight is tpu_model.embedding.weight
    for (name, cpu_parameter), tpu_parameter in zip(cpu_model.named_parameters(),
                                                     tpu_model.parameters()):
        assert tpu_parameter.device.type == "tpu"
        torch.testing.assert_close(tpu_parameter.detach().cpu(), cpu_parameter.detach(),
                                   rtol=1e-5, atol=1e-6, msg=name)


def test_gradients_move_with_parameters_and_keep_accumulating():
    cpu_model, tpu_model = models()
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
    cpu_model(tokens).sum().backward()
    tpu_model(tokens).sum().backward()  # gradients first accumulate on the CPU
    grads = [p.grad for p in tpu_model.parameters()]
    tpu_model.to("tpu")
    assert [p.grad for p in tpu_model.parameters()] == grads  # same grad objects, moved
    assert all(g.device.type == "tpu" for g in grads)
    # the gradient accumulators follow the parameters to the device
    cpu_model(tokens).sum().backward()
    tpu_model(tokens.to("tpu")).sum().backward()
    for cpu_parameter, tpu_parameter in zip(cpu_model.parameters(), tpu_model.parameters()):
        assert tpu_parameter.grad.device.type == "tpu"
        torch.testing.assert_close(tpu_parameter.grad.cpu(), cpu_parameter.grad)
    # and back to the CPU
    parameters = list(tpu_model.parameters())
    tpu_model.cpu()
    assert list(tpu_model.parameters()) == parameters
    assert tpu_model.head.weight is tpu_model.embedding.weight
    cpu_model(tokens).sum().backward()
    tpu_model(tokens).sum().backward()
    for cpu_parameter, tpu_parameter in zip(cpu_model.parameters(), tpu_model.parameters()):
        assert tpu_parameter.device.type == "cpu" and tpu_parameter.grad.device.type == "cpu"
        torch.testing.assert_close(tpu_parameter.grad, cpu_parameter.grad)


def test_assigning_data_across_devices():
    parameter = nn.Parameter(torch.arange(4.0))
    parameter.data = torch.full((2, 3), 7.0, device="tpu")
    assert parameter.device.type == "tpu" and parameter.shape == (2, 3)
    assert parameter.requires_grad and isinstance(parameter, nn.Parameter)
    (parameter * 2).sum().backward()
    assert parameter.grad.device.type == "tpu"
    torch.testing.assert_close(parameter.grad.cpu(), torch.full((2, 3), 2.0))
    parameter.data = torch.ones(5)
    assert parameter.device.type == "cpu"
    torch.testing.assert_close(parameter.detach(), torch.ones(5))


def test_huggingface_gpt2_keeps_its_tied_head():
    import transformers  # a test extra, installed by `make setup` (tools/install_deps.py)

    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    cpu_model = transformers.GPT2LMHeadModel(config)
    tpu_model = transformers.GPT2LMHeadModel(config)
    tpu_model.load_state_dict(cpu_model.state_dict())
    tpu_optimizer = torch.optim.SGD(tpu_model.parameters(), lr=0.1)
    cpu_optimizer = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    tpu_model.to("tpu")
    assert tpu_model.lm_head.weight is tpu_model.transformer.wte.weight
    assert tpu_model.lm_head.weight.device.type == "tpu"
    tokens = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        for model, optimizer, device in [(cpu_model, cpu_optimizer, "cpu"),
                                         (tpu_model, tpu_optimizer, "tpu")]:
            optimizer.zero_grad()
            model(tokens.to(device), labels=tokens.to(device)).loss.backward()
            optimizer.step()
    torch.testing.assert_close(tpu_model.transformer.wte.weight.detach().cpu(),
                               cpu_model.transformer.wte.weight.detach(), rtol=1e-4, atol=1e-5)
    assert tpu_model.lm_head.weight is tpu_model.transformer.wte.weight
