"""Writes that overlap their own inputs: in-place ops, out= and copy_ raise where CPU raises
(same exception and message) and compute what CPU computes where CPU accepts them."""

import pytest
import torch

from conftest import assert_like_cpu, assert_same
from cpu_only_ops import define_cpu_only_op

overlap_example = define_cpu_only_op("overlap_example")
overlap_example_ = torch.ops.tpu_test.overlap_example_


def line(device, n=8):
    return torch.arange(float(n), device=device)


def square(device):
    return torch.arange(16.0, device=device).reshape(4, 4)


def idx(device, *values):
    return torch.tensor(values, device=device)


# Each case builds its tensors on `d`, runs one write and returns the written-to storage's base.
CASES = {
    # TensorIterator ops: partial overlap of output and input raises, full overlap is fine
    "add_shifted": lambda d: (lambda x: (x[1:].add_(x[:-1]), x)[1])(line(d)),
    "add_out_prefix": lambda d: (lambda a: (torch.add(a, a, out=a[:2]), a)[1])(line(d, 4)),
    "add_out_shifted": lambda d: (lambda a: (torch.add(a[:4], a[:4], out=a[2:6]), a)[1])(line(d)),
    "add_out_same": lambda d: (lambda a: (torch.add(a, 1, out=a), a)[1])(line(d)),
    "add_alias_full": lambda d: (lambda x: (x.add_(x.view(-1)), x)[1])(line(d)),
    "neg_out_shifted": lambda d: (lambda x: (torch.neg(x[:-1], out=x[1:]), x)[1])(line(d)),
    "as_strided_shifted": lambda d: (lambda x: (x.as_strided((3,), (1,), 1).mul_(
        x.as_strided((3,), (1,), 0)), x)[1])(line(d)),
    "as_strided_zero_stride": lambda d: (lambda x: (x.as_strided((3, 3), (0, 1)).add_(1), x)[1])(
        line(d)),
    "transpose_into_self": lambda d: (lambda x: (x.t().add_(x), x)[1])(square(d)),
    "where_out_shifted": lambda d: (lambda x: (torch.where(x[:-1] > 2, x[:-1], x[1:], out=x[1:]),
                                               x)[1])(line(d)),
    "clamp_out_shifted": lambda d: (lambda x: (torch.clamp(x[:-1], 1, 3, out=x[1:]), x)[1])(line(d)),
    "addcmul_shifted": lambda d: (lambda x: (x[1:].addcmul_(x[:-1], x[1:]), x)[1])(line(d)),
    "lerp_shifted": lambda d: (lambda x: (x[1:].lerp_(x[:-1], 0.5), x)[1])(line(d)),
    "eq_shifted": lambda d: (lambda x: (x[1:].eq_(x[:-1]), x)[1])(line(d)),
    "cumsum_out_same": lambda d: (lambda a: (torch.cumsum(a, 0, out=a), a)[1])(line(d)),
    "cumsum_out_shifted": lambda d: (lambda a: (torch.cumsum(a[:-1], 0, out=a[1:]), a)[1])(line(d)),
    "gelu_out_shifted": lambda d: (lambda a: (torch._C._nn.gelu(a[:-1], out=a[1:]), a)[1])(line(d)),
    "addmv_out_shifted": lambda d: (lambda a: (torch.addmv(a[:2], a[:4].view(2, 2), a[:2],
                                                           out=a[1:3]), a)[1])(line(d)),
    "disjoint_out": lambda d: (lambda a: (torch.mul(a[:4], 2, out=a[4:]), a)[1])(line(d)),
    # expanded (self-overlapping) outputs
    "add_expanded_self": lambda d: (lambda x: (x.expand(3, 4).add_(1), x)[1])(line(d, 4)),
    "uniform_expanded": lambda d: (lambda x: (x.expand(3, 4).uniform_(), x.shape)[1])(line(d, 4)),
    "add_out_expanded": lambda d: torch.add(line(d, 4), 1, out=torch.zeros(4, device=d).expand(3, 4)),
    "scatter_expanded": lambda d: line(d, 4).expand(3, 4).scatter_(1, idx(d, [0], [1], [2]), 1.0),
    # ops whose CPU kernels reject any overlap, full included
    "cat_out_over_inputs": lambda d: (lambda a: (torch.cat([a[:2], a[2:4]], out=a[:4]), a)[1])(
        line(d)),
    "cat_out_shifted": lambda d: (lambda a: (torch.cat([a[:2], a[2:4]], out=a[1:5]), a)[1])(line(d)),
    "cat_out_disjoint": lambda d: (lambda a: (torch.cat([a[:2], a[2:4]], out=a[4:]), a)[1])(line(d)),
    "stack_out_shifted": lambda d: (lambda a: (torch.stack([a[:2], a[2:4]], out=a[1:5].view(2, 2)),
                                               a)[1])(line(d)),
    "index_select_out_same": lambda d: (lambda a: (torch.index_select(
        a, 0, idx(d, 1, 0, 2, 3, 4, 5, 6, 7), out=a), a)[1])(line(d)),
    "gather_out_same": lambda d: (lambda a: (torch.gather(a, 0, idx(d, 1, 0, 2, 3, 4, 5, 6, 7),
                                                          out=a), a)[1])(line(d)),
    "take_out_same": lambda d: (lambda a: (torch.take(a, idx(d, 1, 0, 2, 3, 4, 5, 6, 7), out=a),
                                           a)[1])(line(d)),
    "scatter_src_self": lambda d: (lambda a: (a.scatter_(0, idx(d, 1, 0), a), a)[1])(line(d, 2)),
    "scatter_add_src_self": lambda d: (lambda a: (a.scatter_add_(0, idx(d, 1, 0), a), a)[1])(
        line(d, 2)),
    "scatter_reduce_src_self": lambda d: (lambda a: (a.scatter_reduce_(0, idx(d, 1, 0), a, "sum"),
                                                     a)[1])(line(d, 2)),
    "index_add_self": lambda d: (lambda a: (a.index_add_(0, idx(d, 1, 0), a), a)[1])(line(d, 2)),
    "index_reduce_self": lambda d: (lambda a: (a.index_reduce_(0, idx(d, 1, 0), a, "prod"), a)[1])(
        line(d, 2)),
    "index_put_values_self": lambda d: (lambda a: (a.index_put_((idx(d, 1, 0),), a), a)[1])(
        line(d, 2)),
    "index_put_values_shifted": lambda d: (lambda a: (a[1:].index_put_((idx(d, 1, 0),), a[:2],
                                                                       accumulate=True), a)[1])(line(d)),
    "index_out_same": lambda d: (lambda a: (torch.ops.aten.index.Tensor_out(
        a, [torch.arange(8, device=d).flip(0)], out=a), a)[1])(line(d)),
    "index_copy_valid": lambda d: line(d).index_copy_(0, idx(d, 1, 0), line(d, 2) + 10),
    "index_copy_source_self": lambda d: (lambda a: (a.index_copy_(0, idx(d, 1, 0), a), a)[1])(
        line(d, 2)),
    "put_source_self": lambda d: (lambda a: (a.put_(idx(d, 1, 0), a), a)[1])(line(d, 2)),
    "scatter_out_self": lambda d: (lambda a: (torch.scatter(a, 0, idx(d, 1, 0), line(d, 2) + 5,
                                                            out=a), a)[1])(line(d)),
    "index_add_out_self": lambda d: (lambda a: (torch.index_add(a, 0, idx(d, 1, 0), line(d, 2),
                                                                out=a), a)[1])(line(d)),
    # ops whose CPU kernels do not check: computed, like CPU
    "softmax_out_shifted": lambda d: (lambda a: (torch._softmax(a[:-1], 0, False, out=a[1:]), a)[1])(
        line(d)),
    "triu_transposed": lambda d: square(d).t().triu_(),
    "dot_out_shifted": lambda d: (lambda a: (torch.dot(a[:3], a[:3], out=a[1:2].view(())), a)[1])(
        line(d)),
    "masked_fill_shifted_value": lambda d: (lambda x: (x[1:].masked_fill_(x[1:] > 3, x[0]), x)[1])(
        line(d)),
    # copy_
    "copy_shifted": lambda d: (lambda x: (x[1:].copy_(x[:-1]), x)[1])(line(d)),
    "setitem_shifted": lambda d: (lambda x: (x.__setitem__(slice(1, None), x[:-1]), x)[1])(line(d)),
    "copy_transposed": lambda d: (lambda x: (x.copy_(x.t()), x)[1])(square(d)),
    "copy_alias": lambda d: (lambda x: (x.copy_(x.view(-1)), x)[1])(line(d)),
    "copy_self": lambda d: (lambda x: (x.copy_(x), x)[1])(line(d)),
    "copy_expanded_self": lambda d: (lambda x: x.copy_(x))(line(d, 4).expand(3, 4)),
    "copy_into_expanded": lambda d: torch.zeros(4, device=d).expand(3, 4).copy_(
        torch.ones(3, 4, device=d)),
    "copy_cpu_into_expanded": lambda d: torch.zeros(4, device=d).expand(3, 4).copy_(torch.ones(3, 4)),
    "copy_dtype_alias": lambda d: (lambda x: (x.view(torch.int32)[1:].copy_(x.view(torch.int32)[:-1]),
                                              x)[1])(line(d)),
    # an op on the CPU fallback: its CPU kernel sees separate copies, so the check is ours
    "fallback_shifted": lambda d: (lambda x: (overlap_example_(x[1:], x[:-1]), x)[1])(line(d)),
    "fallback_out_shifted": lambda d: (lambda x: (overlap_example(x[:-1], x[:-1], out=x[1:]), x)[1])(
        line(d)),
    "fallback_full_overlap": lambda d: (lambda x: (overlap_example_(x, x), x)[1])(line(d)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_overlapping_write_matches_cpu(case):
    assert_like_cpu(CASES[case])


def test_rejected_write_leaves_the_tensor_unchanged():
    x = line("tpu")
    with pytest.raises(RuntimeError, match="^unsupported operation: some elements of the input"):
        x[1:].add_(x[:-1])
    assert_same(x, line("cpu"))


# Writes to a tensor whose own elements share memory that CPU does not reject (ATen's check only
# sees stride-0 dims): CPU writes element after element, so later elements see earlier writes;
# tpu computes every element before writing any, so it raises instead of differing.
def unfolded(device):
    """The issue's example: windows of 5 over 6 zeros, stepping by 1 (sizes [1, 2, 5])."""
    base = torch.zeros(1, 6, device=device)
    return base, base.unfold(1, 5, 1)


def overlapping_window(device):
    base = line(device)
    return base, base.as_strided((3, 3), (1, 1))


SELF_OVERLAPPING_WRITES = {
    "add_": lambda base, view: view.add_(1.0),
    "mul_": lambda base, view: view.mul_(torch.full(view.shape, 2.0, device=base.device)),
    "masked_fill_": lambda base, view: view.masked_fill_(
        torch.ones(view.shape, dtype=torch.bool, device=base.device), 3.0),
    "copy_": lambda base, view: view.copy_(torch.ones(view.shape)),
    "add": lambda base, view: torch.add(torch.ones(view.shape, device=base.device), 1, out=view),
    "clamp_": lambda base, view: view.clamp_(min=1.0),
    "_foreach_add_": lambda base, view: torch._foreach_add_(
        [torch.zeros(2, device=base.device), view], 1.0),
    "_foreach_mul_": lambda base, view: torch._foreach_mul_(
        [view], [torch.full(view.shape, 3.0, device=base.device)]),
}


def self_overlap_error(op, view):
    return (f"{op}: unsupported operation on tpu: more than one element of the written-to tensor "
            f"(sizes {list(view.shape)}, strides {list(view.stride())}, storage offset "
            f"{view.storage_offset()}) refers to a single memory location, and tpu cannot "
            "reproduce the element-by-element result CPU computes for such a write. Please "
            "clone() the tensor before performing the operation.")


@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
@pytest.mark.parametrize("make", [unfolded, overlapping_window], ids=["unfold", "as_strided"])
@pytest.mark.parametrize("op", sorted(SELF_OVERLAPPING_WRITES))
def test_a_write_to_self_overlapping_elements_raises_where_cpu_computes(op, make, mode):
    import torch_tpu

    write = SELF_OVERLAPPING_WRITES[op]
    cpu_base, cpu_view = make("cpu")
    write(cpu_base, cpu_view)  # CPU accepts it (its answer depends on its iteration order)
    with torch_tpu.eager_mode(mode):
        base, view = make("tpu")
        before = base.cpu()
        with pytest.raises(RuntimeError) as caught:
            write(base, view)
        assert str(caught.value).split("\n")[0] == self_overlap_error(op, view)
        assert_same(base, before)  # nothing was written


def test_the_issue_example_no_longer_gives_a_wrong_answer():
    # CPU adds 1 once per window an element lies in ([1, 2, 2, 2, 2, 1]); tpu used to add it once
    # ([1, 1, 1, 1, 1, 1]).
    cpu_base, cpu_view = unfolded("cpu")
    cpu_view.add_(1.0)
    base, view = unfolded("tpu")
    with pytest.raises(RuntimeError, match="^add_: unsupported operation on tpu"):
        view.add_(1.0)
    assert not torch.equal(cpu_base, base.cpu())  # so the test shows what tpu refuses to get wrong


SELF_OVERLAP_ACCEPTED = {
    # every aliased element gets the one value: the order does not matter
    "fill_unfolded": lambda d: (lambda b, v: (v.fill_(2.0), b)[1])(*unfolded(d)),
    "zero_unfolded": lambda d: (lambda b, v: (v.zero_(), b)[1])(*(lambda b: (b, b.unfold(0, 3, 1)))(
        line(d))),
    "foreach_zero_unfolded": lambda d: (lambda b, v: (torch._foreach_zero_([v]), b)[1])(
        *unfolded(d)),
    "foreach_add_expanded": lambda d: torch._foreach_add_([line(d, 4).expand(3, 4)], 1.0),
    "fill_tensor_value_unfolded": lambda d: (lambda b, v: (v.fill_(torch.tensor(4.0, device=d)),
                                                           b)[1])(*unfolded(d)),
    # strides that do not nest but never meet (offsets 0, 3, 2, 5, 4, 7)
    "interleaved_no_overlap": lambda d: (lambda x: (x.as_strided((3, 2), (2, 3)).add_(1), x)[1])(
        line(d)),
    "interleaved_no_overlap_copy": lambda d: (lambda x: (x.as_strided((3, 2), (2, 3)).copy_(
        torch.arange(6.0).view(3, 2)), x)[1])(line(d)),
    # reading overlapping elements is fine
    "read_unfolded": lambda d: unfolded(d)[1].sum(-1),
}


@pytest.mark.parametrize("case", sorted(SELF_OVERLAP_ACCEPTED))
def test_self_overlapping_writes_that_agree_with_cpu_still_run(case):
    assert_like_cpu(SELF_OVERLAP_ACCEPTED[case])
