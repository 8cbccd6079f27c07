"""A growing KV cache (torch.cat along the length, attention over it, ids read at a moving
offset) shares bucketed programs (csrc/exec/growing_shapes.h) instead of compiling per step, and
every step equals CPU."""

import re

import pytest
import torch

import torch_tpu
from conftest import assert_same, run_python
from generation_helpers import divide_by_a_shrinking_divisor


def test_growing_cache_equals_cpu_and_compiles_per_bucket_not_per_step():
    torch.manual_seed(0)
    q = torch.randn(2, 1, 8)
    k = torch.randn(2, 5, 8)
    kt, qt = k.to("tpu"), q.to("tpu")
    ids = torch.arange(5).view(1, 5)
    idt = ids.to("tpu")
    compiles = []
    for _ in range(40):
        row = torch.randn(2, 1, 8)
        k = torch.cat([k, row], 1)
        kt = torch.cat([kt, row.to("tpu")], 1)
        s = torch.softmax(q @ k.transpose(1, 2) * 0.5, -1)
        st = torch.softmax(qt @ kt.transpose(1, 2) * 0.5, -1)
        ids = torch.cat([ids, ids[:, -1:] + 1], 1)
        idt = torch.cat([idt, idt[:, -1:] + 1], 1)
        torch.testing.assert_close((st @ kt).cpu(), s @ k)
        compiles.append(torch_tpu.metrics()["compile_count"])
    torch.testing.assert_close(idt.cpu(), ids)
    torch.testing.assert_close(kt.cpu(), k)
    assert kt.shape == k.shape and kt.stride() == k.stride()
    # Inside a bucket (lengths 33..64 here: steps 28..39) no step compiles anything.
    assert compiles[-1] == compiles[30], compiles


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_a_sequence_fed_back_into_itself_shares_programs_from_its_second_step(mode):
    # Each cat reads the previous cat's result: two launches on a line are a growing sequence.
    # Defer-and-fuse records the second in its bucketed form already (a bucket-sized storage);
    # strict mode has built the second's exact program by then and takes the line from the
    # third. The same sizes from unrelated tensors need a third launch on the line before one
    # is bucketed. (Widths no other test uses: lines other tests found would serve them.)
    rows = torch.randn(4, 1, 11, generator=torch.Generator().manual_seed(0))
    with torch_tpu.eager_mode(mode):
        fed_back, expected = torch.zeros(5, 11).to("tpu"), torch.zeros(5, 11)
        bucketed = []
        for row in rows:
            fed_back = torch.cat([fed_back, row[0:1].to("tpu")])
            expected = torch.cat([expected, row[0:1]])
            bucketed.append(fed_back.untyped_storage().nbytes() > fed_back.nbytes)
            assert torch.equal(fed_back.cpu(), expected)
        assert bucketed == ([False, True, True, True] if mode == "defer_and_fuse"
                            else [False, False, True, True])
        unrelated = []
        for length, row in zip(range(5, 9), rows):
            fresh = torch.cat([torch.zeros(length, 13).to("tpu"), row[0:1, :1].expand(1, 13)
                               .to("tpu")])
            unrelated.append(fresh.untyped_storage().nbytes() > fresh.nbytes)
        assert unrelated == [False, False, True, True]


def test_a_full_cache_grows_in_place_when_read_and_keeps_its_values():
    # A cat's bucketed storage filled to its bucket's end grows to the next bucket's size when an
    # op reads it (csrc/exec/growing_shapes.h, GrowingStorageOrigin): the step that crosses into
    # the next bucket then reads storages of the new size, as the steps after it do. (Sizes no
    # other test uses: a line other tests found would move the buckets.)
    rows = torch.randn(130, 3, 1, 6, generator=torch.Generator().manual_seed(0))
    cache = torch.zeros(3, 5, 6)
    on_tpu, grew = cache.to("tpu"), []
    for row in rows:
        cache, on_tpu = torch.cat([cache, row], 1), torch.cat([on_tpu, row.to("tpu")], 1)
        storage_bytes = on_tpu.untyped_storage().nbytes()
        torch.tpu.synchronize()
        allocated = torch.tpu.memory_allocated()
        total = on_tpu.sum()  # the read
        grown_bytes = on_tpu.untyped_storage().nbytes()
        torch.tpu.synchronize()
        if grown_bytes != storage_bytes:
            grew.append(on_tpu.shape[1])
            assert storage_bytes == on_tpu.nbytes  # it was full
            # Counted as memory; the next result on the line takes exactly the grown size.
            assert torch.tpu.memory_allocated() - allocated == grown_bytes - storage_bytes
            following = torch.cat([on_tpu, row.to("tpu")], 1)
            assert following.untyped_storage().nbytes() == grown_bytes
        torch.testing.assert_close(total.cpu(), cache.sum())
        torch.testing.assert_close(on_tpu.cpu(), cache)
        assert on_tpu.stride() == cache.stride()
    assert grew == [65, 129], grew  # small results start at bucket 64


@pytest.mark.parametrize("mode", ["strict", "debug"])
def test_padding_never_raises_and_a_real_zero_still_does(mode):
    expected, cpu_error = divide_by_a_shrinking_divisor("cpu")
    with torch_tpu.eager_mode(mode):
        quotients, error = divide_by_a_shrinking_divisor("tpu")
    assert cpu_error == "ZeroDivisionError" and len(expected) == 8
    if mode == "debug":  # checked on the host, for this very launch
        assert error == ("ZeroDivisionError: div.Tensor_mode: integer division by zero"
                         " (checked because TORCH_TPU_LAUNCH_BLOCKING=1)")
    else:  # found at the next sync, by the program that lengths up to 64 share
        lengths = re.fullmatch(
            r"aten::div\.Tensor_mode\(Long\[(\d+)\], Long\[(\d+)\], floor\), or the same op at"
            r" another length of its growing sequence \(one program up to bucket 64\):"
            r" ZeroDivisionError \(detected on the device; the op's result is undefined\)", error)
        assert lengths and int(lengths[1]) == int(lengths[2]) <= 64, error
    assert len(quotients) == len(expected)
    for quotient, cpu_quotient in zip(quotients, expected):
        assert torch.equal(quotient, cpu_quotient)


def test_an_index_read_at_a_moving_offset_is_still_checked_in_debug_mode():
    table = torch.arange(5.0, device="tpu")
    ids = torch.tensor([0], device="tpu")
    taken = []
    with torch_tpu.eager_mode("debug"):
        with pytest.raises(IndexError) as error:
            for _ in range(8):
                ids = torch.cat([ids, ids[-1:] + 1])
                taken.append(torch.take(table, ids[-1:]).item())
    assert taken == [1.0, 2.0, 3.0, 4.0]
    assert str(error.value).split("\n")[0] == (
        "take: index 5 is out of bounds for dimension 0 with size 5"
        " (checked because TORCH_TPU_LAUNCH_BLOCKING=1)")


def test_lengths_off_any_line_and_shrinking_lengths_equal_cpu():
    torch.manual_seed(1)
    keys = torch.randn(3, 2, 4)
    query = torch.randn(3, 1, 4)
    on_tpu, query_on_tpu = keys.to("tpu"), query.to("tpu")
    for step in range(1, 9):  # lengths 3, 4, 6, 9, 13, ...: no three on one line
        rows = torch.randn(3, step, 4)
        keys, on_tpu = torch.cat([keys, rows], 1), torch.cat([on_tpu, rows.to("tpu")], 1)
        assert_same(torch.softmax(query_on_tpu @ on_tpu.transpose(1, 2), -1),
                    torch.softmax(query @ keys.transpose(1, 2), -1))
    for length in range(keys.shape[1], keys.shape[1] - 8, -1):  # a window that shrinks
        assert_same(torch.softmax(query_on_tpu @ on_tpu[:, :length].transpose(1, 2), -1),
                    torch.softmax(query @ keys[:, :length].transpose(1, 2), -1))
        assert_same(on_tpu[:, :length].exp(), keys[:, :length].exp())


def test_transposed_and_two_dimensional_growth_keep_cpu_values_and_strides():
    torch.manual_seed(2)
    cache = torch.randn(4, 2, 3)  # grows along dim 1, read transposed
    on_tpu = cache.to("tpu")
    for _ in range(20):
        row = torch.randn(4, 1, 3)
        cache, on_tpu = torch.cat([cache, row], 1), torch.cat([on_tpu, row.to("tpu")], 1)
        expected = cache.transpose(0, 1).sigmoid() * 2 - cache.transpose(0, 1)
        result = on_tpu.transpose(0, 1).sigmoid() * 2 - on_tpu.transpose(0, 1)
        assert_same(result, expected)
        assert result.stride() == expected.stride()
        length = cache.shape[1]
        mask = torch.ones(length, length).tril().bool()  # a causal mask growing in both dims
        mask_on_tpu = torch.ones(length, length, device="tpu").tril().bool()
        scores = cache.sum(-1).unsqueeze(-1) * cache.sum(-1).unsqueeze(1)  # (4, L, L)
        scores_on_tpu = on_tpu.sum(-1).unsqueeze(-1) * on_tpu.sum(-1).unsqueeze(1)
        assert_same(scores_on_tpu.masked_fill(~mask_on_tpu, float("-inf")).softmax(-1),
                    scores.masked_fill(~mask, float("-inf")).softmax(-1))
    assert on_tpu.untyped_storage().nbytes() >= cache.untyped_storage().nbytes()
    assert torch.equal(on_tpu.cpu(), cache)


def test_large_growing_results_keep_storages_under_twice_their_size():
    rows = torch.randn(12, 70_000)
    grown, on_tpu = rows[:1], rows[:1].to("tpu")
    bucketed = 0
    for length in range(2, 13):
        grown = torch.cat([grown, rows[length - 1:length]])
        on_tpu = torch.cat([on_tpu, rows[length - 1:length].to("tpu")])
        assert on_tpu.untyped_storage().nbytes() < 2 * on_tpu.nbytes
        bucketed += on_tpu.untyped_storage().nbytes() > on_tpu.nbytes
    assert bucketed > 0  # the lengths did share bucketed programs
    assert torch.equal(on_tpu.cpu(), grown)


@pytest.mark.parametrize("lengths", [[40, 80, 60, 100, 20], [50, 70, 110, 170, 250]],
                         ids=["not_increasing", "not_evenly_spaced"])
def test_sizes_that_only_lie_on_a_line_keep_exact_programs_and_storages(lengths):
    # Ordinary code with a few sizes (a smaller last batch, samples of several lengths) is not a
    # growing sequence: its results are their own storages, as on CPU.
    for length in lengths:
        x = torch.randn(3, length)
        result = torch.cat([x.to("tpu"), x.to("tpu")], 1).sigmoid()
        assert_same(result, torch.cat([x, x], 1).sigmoid())
        assert result.untyped_storage().nbytes() == result.nbytes


def test_growing_shapes_can_be_turned_off():
    code = """
import torch, torch_tpu
x, on_tpu = torch.ones(2, 3), torch.ones(2, 3, device="tpu")
for step in range(12):
    row = torch.full((2, 1), float(step))
    x, on_tpu = torch.cat([x, row], 1), torch.cat([on_tpu, row.to("tpu")], 1)
    assert on_tpu.untyped_storage().nbytes() == on_tpu.nbytes, step
assert torch.equal(on_tpu.cpu(), x)
print("exact", torch_tpu.metrics()["compile_count"])
"""
    result = run_python(code, TORCH_TPU_GROWING_SHAPES="0", TORCH_TPU_SHARED_CACHE_MAX_BYTES="0")
    assert result.returncode == 0, result.stderr[-2000:]
    # One cat program per length: 12 lengths.
    assert int(result.stdout.split("exact")[1]) >= 12
