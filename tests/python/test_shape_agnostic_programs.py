"""Pointwise ops over contiguous operands of one shape run one program per element count, not
per shape (issue: compile less). Results keep PyTorch's shapes, strides and values."""

import pytest
import torch

from conftest import assert_same, compiles, sample

SHAPES = [(4, 6), (2, 3, 4), (24, 1), (1, 2, 1, 12)]


@pytest.mark.parametrize("op", [
    lambda a, b: a + b,
    lambda a, b: torch.where(a > b, a, b * 2.5),
    lambda a, b: torch.nn.functional.gelu(a) * b.sigmoid(),
    lambda a, b: torch.addcmul(a, a, b, value=0.5),
], ids=["add", "where", "gelu_sigmoid", "addcmul"])
def test_one_program_serves_every_shape_with_the_same_element_count(op):
    a, b = sample((24,), torch.float32, seed=1), sample((24,), torch.float32, seed=2)
    assert_same(op(a.to("tpu"), b.to("tpu")), op(a, b))

    def other_shapes():
        for shape in SHAPES:
            a_shaped, b_shaped = a.reshape(shape), b.reshape(shape)
            result = op(a_shaped.to("tpu"), b_shaped.to("tpu"))
            assert_same(result, op(a_shaped, b_shaped))
            assert result.stride() == op(a_shaped, b_shaped).stride()

    assert compiles(other_shapes) == 0


def test_in_place_and_zero_dim_operands_are_flattened_too():
    x = sample((3, 8), torch.float32)
    scale = torch.tensor(1.5)
    on_tpu = x.to("tpu")
    on_tpu.mul_(scale.to("tpu")).add_(2.0)
    assert_same(on_tpu, x * scale + 2.0)

    def reshaped():
        other = x.reshape(4, 6).to("tpu")
        other.mul_(scale.to("tpu")).add_(2.0)
        assert_same(other, x.reshape(4, 6) * scale + 2.0)

    assert compiles(reshaped) == 0


def test_layouts_that_are_not_contiguous_keep_their_own_programs_and_strides():
    x = sample((6, 4), torch.float32)
    transposed = x.t()
    result = transposed.to("tpu") + 1  # .to keeps the transposed layout
    assert_same(result, transposed + 1)
    assert result.stride() == (transposed + 1).stride()
    channels_last = sample((2, 3, 4, 5), torch.float32).contiguous(memory_format=torch.channels_last)
    cloned = channels_last.to("tpu").clone(memory_format=torch.preserve_format)
    assert cloned.stride() == channels_last.clone().stride()
    assert_same(cloned, channels_last.clone())
    forced = sample((2, 3, 4, 5), torch.float32)
    as_channels_last = forced.to("tpu").clone(memory_format=torch.channels_last)
    assert as_channels_last.stride() == forced.clone(memory_format=torch.channels_last).stride()


def test_broadcasting_operands_are_not_flattened():
    a, b = sample((4, 6), torch.float32), sample((6,), torch.float32)
    assert_same(a.to("tpu") * b.to("tpu"), a * b)
    column = b[:, None]
    assert_same(a.t().contiguous().to("tpu") - column.to("tpu"), a.t().contiguous() - column)


def test_shape_errors_name_the_real_shapes():
    scalar = torch.zeros((), device="tpu")
    with pytest.raises(RuntimeError, match=r"output with shape \[\] doesn't match the broadcast "
                                           r"shape \[2, 3\]"):
        scalar.add_(torch.ones(2, 3, device="tpu"))
    assert scalar.item() == 0


def test_random_ops_draw_the_same_bits_whatever_the_layout():
    probabilities = torch.full((4, 6), 0.5)
    torch.tpu.manual_seed(3)
    first = torch.bernoulli(probabilities.to("tpu")).cpu()
    torch.tpu.manual_seed(3)
    second = torch.bernoulli(probabilities.t().contiguous().t().to("tpu")).cpu()
    assert torch.equal(first, second)
