"""Results keep PyTorch's layouts: memory_format arguments and TensorIterator's stride rules."""

import pytest
import torch

from conftest import assert_same

LAYOUT_CASES = {
    "clone_channels_last": lambda t: t.clone(memory_format=torch.channels_last),
    "contiguous_channels_last": lambda t: t.contiguous(memory_format=torch.channels_last),
    "add_keeps_channels_last": lambda t: t.contiguous(memory_format=torch.channels_last) + 1,
    "relu_keeps_channels_last": lambda t: torch.relu(t.contiguous(memory_format=torch.channels_last)),
    "mul_of_permuted": lambda t: t.permute(0, 2, 3, 1) * 2,
    "transposed_plus_one": lambda t: t[0, 0].t() + 1,
    "binary_mixed_layouts": lambda t: t.contiguous(memory_format=torch.channels_last) + t,
    "sum_over_channels": lambda t: t.contiguous(memory_format=torch.channels_last).sum(1),
    # A size-1 dim whose stride equals another dim's: TensorIterator puts the smaller dim inside.
    "add_of_unfolded_transpose": lambda t: t[0, 0, :3, :3].t().unfold(1, 3, 1) + 1,
    "exp_of_tied_size_one_stride": lambda t: t[0, 0, :3, :3].t().unsqueeze(1).exp(),
    "clone_of_tied_size_one_stride": lambda t: t[0, 0, :3, :3].t().unfold(1, 3, 1).clone(),
    "mul_of_tied_size_one_strides": lambda t: (t[0, 0, :3, :3].t().unfold(1, 3, 1)
                                              * t[0, 1, :3, :3].t().unsqueeze(1)),
}


@pytest.mark.parametrize("name", sorted(LAYOUT_CASES))
def test_result_strides_match_cpu(name):
    case = LAYOUT_CASES[name]
    x = torch.randn(2, 3, 4, 5)
    expected = case(x)
    result = case(x.to("tpu"))
    assert result.stride() == expected.stride()
    assert result.is_contiguous() == expected.is_contiguous()
    assert result.is_contiguous(memory_format=torch.channels_last) == expected.is_contiguous(
        memory_format=torch.channels_last)
    assert_same(result, expected)


def test_empty_like_channels_last_has_channels_last_strides():
    x = torch.randn(2, 3, 4, 5)
    expected = torch.empty_like(x, memory_format=torch.channels_last)
    result = torch.empty_like(x.to("tpu"), memory_format=torch.channels_last)
    assert result.stride() == expected.stride()


def test_view_of_a_transposed_result_fails_like_cpu():
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError) as cpu_error:
        (x.t() + 1).view(-1)
    with pytest.raises(RuntimeError) as tpu_error:
        (x.to("tpu").t() + 1).view(-1)
    assert str(tpu_error.value) == str(cpu_error.value)
