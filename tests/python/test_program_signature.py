"""Programs are cached by a structured signature: two different calls never share a program."""

import torch

from conftest import assert_same


def test_slot_and_dtype_numbers_cannot_run_together():
    # A text key of concatenated numbers printed "slot 1 + bfloat16 (15)" and "slot 11 + half (5)"
    # alike; the second call reused the first program and swapped values.
    halves = [torch.full((2,), float(i), dtype=torch.half) for i in range(11)]
    bf16 = torch.arange(4, dtype=torch.bfloat16)[::2]
    first = halves + [bf16]
    second = halves[:10] + [bf16, halves[10]]
    for tensors in (first, second):
        expected = torch.cat(tensors)
        assert_same(torch.cat([t.to("tpu") for t in tensors]), expected)


def test_default_dtype_is_part_of_the_signature():
    x = torch.arange(4, device="tpu")
    assert_same(x / 2, torch.arange(4) / 2)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert_same(x / 2, torch.arange(4) / 2)
        assert (x / 2).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)


def test_static_doubles_that_print_alike_are_distinct_programs():
    x = torch.linspace(-3, 3, 13)
    a, b = 0.1, 0.1 + 2**-55  # equal when printed with default precision
    assert a != b
    for value in (a, b):
        assert_same(torch.nn.functional.elu(x.to("tpu"), alpha=value),
                    torch.nn.functional.elu(x, alpha=value))


def test_changing_a_python_scalar_does_not_recompile():
    import torch_tpu

    x = torch.randn(16, device="tpu")
    (x * 1.5).cpu()
    before = torch_tpu.metrics()["compile_count"]
    for scale in (2.5, 3.5, 4.25):
        assert_same(x * scale, x.cpu() * scale)
    assert torch_tpu.metrics()["compile_count"] == before
