"""print()/repr() of tpu tensors: the same text as CPU plus the device, without compiling."""

import pytest
import torch

import torch_tpu
from conftest import sample


def same_text_as_cpu(tpu_text: str, cpu: torch.Tensor, device: str = "tpu:0") -> bool:
    """The tpu text is CPU's plus the device suffix (line breaks may move to make room)."""
    suffix = f", device='{device}'"
    text = " ".join(tpu_text.split())
    if text.count(suffix) != 1:
        return False
    return text.replace(suffix, "") == " ".join(repr(cpu).split())


@pytest.mark.parametrize("shape, dtype", [
    ((100, 100), torch.float32),
    ((2000,), torch.float32),
    ((3, 4, 5), torch.bfloat16),
    ((7,), torch.int32),
    ((4, 3), torch.bool),
    ((), torch.float16),
    ((0, 3), torch.float32),
])
def test_repr_matches_cpu_and_compiles_nothing(shape, dtype):
    cpu = sample(shape, dtype)
    tpu = cpu.to("tpu")
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    text = repr(tpu)
    assert torch_tpu.metrics()["compile_count"] == 0
    assert same_text_as_cpu(text, cpu)
    assert str(tpu) == text


def test_repr_keeps_autograd_facts_of_the_tpu_tensor():
    leaf = sample((2, 3), torch.float32).requires_grad_()
    moved = " ".join(repr(leaf.to("tpu")).split())
    assert moved.endswith(", device='tpu:0', grad_fn=<ToCopyBackward0>)")
    leaf_on_tpu = " ".join(repr(leaf.detach().to("tpu").requires_grad_()).split())
    assert leaf_on_tpu.endswith(", device='tpu:0', requires_grad=True)")


def test_nonfinite_values_print_like_cpu():
    cpu = torch.tensor([1.5, float("nan"), float("inf"), -float("inf"), 1e-8])
    assert same_text_as_cpu(repr(cpu.to("tpu")), cpu)
