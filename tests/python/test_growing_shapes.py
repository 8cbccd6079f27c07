"""A growing KV cache (torch.cat along the length, attention over it, ids read at a moving
offset) shares bucketed programs (csrc/exec/growing_shapes.h) instead of compiling per step, and
every step equals CPU."""

import torch

import torch_tpu


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
