"""torch.tpu.set_per_process_memory_fraction, and out-of-memory errors that explain themselves:
an allocation or a program run past the limit raises before anything runs, names the op or
graph, the size and what holds memory, leaves every tensor as it was, and the process keeps
working once memory is freed."""

import gc
import re

import pytest
import torch

import torch_tpu  # noqa: F401

MIB = 1 << 20


def mib(count: int) -> str:
    return f"{count / MIB:.2f} MiB"


@pytest.fixture
def limited(tpu):
    """A limit of 64 MiB above what is allocated now; removed after the test."""
    gc.collect()
    torch.tpu.synchronize()
    _, total = torch.tpu.mem_get_info()
    fraction = (torch.tpu.memory_allocated() + 64 * MIB) / total
    torch.tpu.set_per_process_memory_fraction(fraction)
    limit = torch.tpu.memory_stats()["memory_limit_bytes"]
    yield limit
    torch.tpu.set_per_process_memory_fraction(1.0)
    torch_tpu._C._set_memory_limit(0, 0)


def test_fraction_arguments_are_checked_as_cudas(tpu):
    with pytest.raises(ValueError, match=r"^Invalid fraction value: 1\.5\. Allowed range: 0~1$"):
        torch.tpu.set_per_process_memory_fraction(1.5)
    with pytest.raises(TypeError, match=r"^Invalid type for fraction argument, must be `float`$"):
        torch.tpu.set_per_process_memory_fraction(1)
    assert torch.tpu.get_per_process_memory_fraction() == 1.0


def test_the_fraction_reads_back(limited):
    _, total = torch.tpu.mem_get_info()
    assert torch.tpu.get_per_process_memory_fraction() == pytest.approx(limited / total)


@pytest.mark.strict_mode
def test_an_allocation_past_the_limit_raises_and_memory_freed_is_usable_again(limited):
    ooms = torch.tpu.memory_stats()["num_ooms"]
    keep = torch.full((40 * MIB // 4,), 2.0, device="tpu")  # 40 MiB of the 64
    torch.tpu.synchronize()  # its buffer exists (a launch queued behind its compile has none)
    stats = torch.tpu.memory_stats()
    held = max(stats["allocated_bytes.all.current"], stats["requested_bytes.all.current"])
    with pytest.raises(torch.OutOfMemoryError) as error:
        torch.ones(32 * MIB // 4, device="tpu")
    message = str(error.value)
    first_line = message.splitlines()[0]
    assert first_line == (
        "tpu out of memory: tried to allocate 32.00 MiB (33554432 bytes) on tpu:0, past this "
        f"process's limit of {mib(limited)} (torch.tpu.set_per_process_memory_fraction), of which "
        f"{mib(limited - held)} are free; tpu tensors hold {mib(held)}.")
    assert "Largest live buffers on tpu:0" in message
    assert "40.00 MiB from aten::fill.Scalar(Float[10485760], 2.)" in message
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
    assert torch.equal(keep[:5].cpu(), torch.full((5,), 2.0))
    del keep
    again = torch.ones(32 * MIB // 4, device="tpu")
    assert again.sum().item() == 32 * MIB // 4


@pytest.mark.strict_mode
def test_a_program_past_the_limit_raises_before_it_runs_and_leaves_tensors_intact(limited):
    x = torch.randn(3 * MIB // 4).to("tpu")  # 3 MiB
    y = torch.randn(3 * MIB // 4).to("tpu")
    ballast = torch.zeros(58 * MIB // 4, device="tpu")  # 58 MiB: 64 used in all
    before = x.cpu()
    # x + y needs a new 3 MiB output: past the limit. An in-place add_ reuses x's buffer.
    with pytest.raises(torch.OutOfMemoryError) as error:
        x + y
    first_line = str(error.value).splitlines()[0]
    assert re.fullmatch(
        r"tpu out of memory: (tried to allocate|a run needs) 3\.00 MiB \(3145728 bytes\) on tpu:0 "
        r"for aten::add\.Tensor\(Float\[786432\], Float\[786432\], 1\)"
        r"( \(outputs and the compiler's temporaries\))?, past this process's limit of .*",
        first_line), first_line
    assert torch.equal(x.cpu(), before)
    x.add_(y)  # donated: fits
    assert torch.equal(x.cpu(), before + y.cpu())
    del ballast
    z = x + y
    assert torch.equal(z.cpu(), before + y.cpu() + y.cpu())


@pytest.mark.strict_mode
def test_a_programs_temporaries_count_against_the_limit(limited):
    # The random bits of a normal draw are temporaries the compiler reports for the program.
    torch.randn(1024, 1024, device="tpu")  # 4 MiB, compiled once outside the squeeze
    stats = next(p for p in torch.tpu.program_memory_stats()
                 if p["program"].startswith("aten::normal_functional(Float[1024, 1024]"))
    assert stats["temporary_bytes"] >= 4 * MIB
    free = limited - torch.tpu.memory_allocated()
    ballast = torch.zeros((free - 4 * MIB - stats["temporary_bytes"] // 2) // 4, device="tpu")
    with pytest.raises(torch.OutOfMemoryError, match=r"^tpu out of memory: a run needs "):
        torch.randn(1024, 1024, device="tpu")
    del ballast
    assert torch.randn(1024, 1024, device="tpu").shape == (1024, 1024)
