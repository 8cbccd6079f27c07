"""Views share storage and in-place ops mutate it, exactly as on CPU (BRIEF §3.1)."""

import pytest
import torch

from conftest import assert_same


def pair(*shape, dtype=torch.float32):
    cpu = torch.arange(torch.Size(shape).numel(), dtype=torch.float64).reshape(shape)
    cpu = (cpu * 1.5 - 7).to(dtype)
    return cpu, cpu.to("tpu")


MUTATIONS = {
    "transpose_add_": lambda x: x.t().add_(1),
    "column_zero_": lambda x: x[:, 0].zero_(),
    "diagonal_fill_": lambda x: x.diagonal().fill_(2),
    "flat_view_mul_": lambda x: x.view(-1).mul_(2),
    "narrow_sub_": lambda x: x.narrow(1, 1, 2).sub_(5),
    "strided_rows_": lambda x: x[::2].mul_(-1),
    "strided_both_": lambda x: x[1::2, ::3].add_(100),
    "select_row_": lambda x: x.select(0, 2).fill_(-3),
    "slice_assign": lambda x: x.__setitem__((slice(None), slice(1, 3)), 9.0),
    "unsqueezed_": lambda x: x.unsqueeze(0)[0, 1].add_(4),
    "permuted_": lambda x: x.view(2, 2, 4).permute(2, 0, 1)[1].mul_(3),
    "unfold_window_": lambda x: x.view(-1).unfold(0, 4, 4)[1].fill_(1),
    "expand_read_then_write": lambda x: x[0].add_(x[1:2].expand(3, 4).sum(0)),
    "as_strided_": lambda x: x.as_strided((2, 2), (5, 1), 1).neg_(),
    "chunk_": lambda x: x.chunk(2, dim=1)[1].add_(1),
    "split_": lambda x: x.split([1, 3])[1].mul_(0.5),
    "unbind_": lambda x: x.unbind(1)[3].zero_(),
    "squeeze_": lambda x: x[1:2].squeeze(0).add_(1),
    "alias_": lambda x: torch.ops.aten.alias(x).add_(1),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutating_a_view_matches_cpu(name):
    cpu, tpu = pair(4, 4)
    MUTATIONS[name](cpu)
    MUTATIONS[name](tpu)
    assert_same(tpu, cpu)


def test_views_share_storage():
    _, x = pair(4, 4)
    row = x[0]
    assert row._base is x
    assert row.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert x.t().untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert x.clone().untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_mutating_the_base_is_seen_by_views():
    cpu, tpu = pair(3, 4)
    views = lambda x: (x[1], x.t(), x[:, 2:], x.view(12)[5:9])  # noqa: E731
    tpu_views, cpu_views = views(tpu), views(cpu)
    tpu.mul_(2).add_(1)
    cpu.mul_(2).add_(1)
    tpu[0, 0] = 42
    cpu[0, 0] = 42
    for tpu_view, cpu_view in zip(tpu_views, cpu_views):
        assert_same(tpu_view, cpu_view)


def test_copy_into_views_and_across_devices():
    cpu, tpu = pair(4, 5)
    source = torch.linspace(-1, 1, 20).reshape(5, 4)
    tpu.t().copy_(source.to("tpu"))
    cpu.t().copy_(source)
    assert_same(tpu, cpu)
    # CPU -> strided tpu view, and strided tpu view -> CPU
    tpu[:, ::2].copy_(torch.ones(4, 3))
    cpu[:, ::2].copy_(torch.ones(4, 3))
    assert_same(tpu, cpu)
    out = torch.empty(5, 4)
    out.copy_(tpu.t())
    torch.testing.assert_close(out, cpu.t())


def test_dtype_converting_copy_and_to():
    cpu, tpu = pair(3, 3)
    integers = torch.zeros(3, 3, dtype=torch.int32, device="tpu")
    integers.copy_(tpu)
    assert_same(integers, cpu.to(torch.int32))
    assert_same(tpu.to(torch.bfloat16), cpu.to(torch.bfloat16))
    assert_same(tpu.to(torch.float64).to(torch.int64), cpu.to(torch.float64).to(torch.int64))
    assert_same(tpu > 0, cpu > 0)
    assert_same((tpu > 0).to(torch.float16), (cpu > 0).to(torch.float16))


def test_resize_keeps_existing_values_and_grows():
    cpu, tpu = pair(2, 3)
    tpu.resize_(3, 4)
    cpu.resize_(3, 4)
    # Elements that existed keep their values; new ones are unspecified, so compare the old ones.
    assert tpu.shape == (3, 4)
    torch.testing.assert_close(tpu.view(-1)[:6].cpu(), cpu.view(-1)[:6])
    tpu.fill_(1)
    assert torch.equal(tpu.cpu(), torch.ones(3, 4))


def test_set_shares_another_tensors_storage():
    _, source = pair(6)
    target = torch.empty(0, device="tpu")
    target.set_(source)
    assert target.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
    source.add_(1)
    assert torch.equal(target.cpu(), source.cpu())
    view = torch.empty(0, device="tpu").set_(source.untyped_storage(), 2, (2, 2), (1, 2))
    assert torch.equal(view.cpu(), source.cpu().as_strided((2, 2), (1, 2), 2))


def test_view_dtype_reinterprets_bits():
    cpu, tpu = pair(2, 4)
    assert_same(tpu.view(torch.int32), cpu.view(torch.int32))
    assert_same(tpu.view(torch.uint8), cpu.view(torch.uint8))
    assert_same(tpu.view(torch.int16)[:, 1::2], cpu.view(torch.int16)[:, 1::2])
    # Writing through a reinterpreting view changes the original's bits.
    tpu.view(torch.int32)[0, 0] = 0x3F800000
    cpu.view(torch.int32)[0, 0] = 0x3F800000
    assert_same(tpu, cpu)
    assert tpu[0, 0].item() == 1.0


def test_autograd_through_views():
    cpu, tpu = pair(3, 4)
    results = []
    for x in (cpu, tpu):
        leaf = x.clone().requires_grad_(True)
        y = leaf * 2
        y[:, 1].mul_(3)
        z = y.t()[1:].sum() + y.diagonal().sum()
        z.backward()
        results.append(leaf.grad)
    assert_same(results[1], results[0])


def test_out_of_place_results_are_fresh_with_cpu_strides():
    cpu, tpu = pair(3, 4)
    result = tpu.t() + 1
    assert result.stride() == (cpu.t() + 1).stride()
    assert result.untyped_storage().data_ptr() != tpu.untyped_storage().data_ptr()
