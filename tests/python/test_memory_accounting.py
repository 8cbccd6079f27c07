"""Honest memory statistics: a program's own temporaries (what the compiler reports for it) count
in the peaks while it runs, in strict, defer-and-fuse and compiled modes; program_memory_stats,
memory_snapshot and memory_summary say what holds memory."""


import pytest
import torch

import torch_tpu

MIB = 1 << 20


# No garbage from earlier tests may be freed while a test measures memory deltas.
pytestmark = pytest.mark.usefixtures("quiet_collector")


def program_named(fragment: str) -> dict:
    matches = [p for p in torch.tpu.program_memory_stats() if fragment in p["program"]]
    assert matches, f"no program {fragment!r} in {torch.tpu.program_memory_stats()}"
    return matches[0]


@pytest.mark.strict_mode  # names one op's program
def test_program_memory_stats_are_the_compilers_numbers_for_the_programs_run(tpu):
    a = torch.randn(96, 80).to(tpu)
    b = torch.randn(80, 48).to(tpu)
    (a @ b).cpu()
    stats = program_named("aten::mm(Float[96, 80], Float[80, 48])")
    assert set(stats) == {"program", "temporary_bytes", "argument_bytes", "output_bytes",
                          "alias_bytes", "generated_code_bytes", "peak_bytes"}
    assert stats["argument_bytes"] == a.numel() * 4 + b.numel() * 4
    assert stats["output_bytes"] == 96 * 48 * 4
    assert stats["alias_bytes"] == 0
    torch.randn(64, 64, device=tpu).cpu()  # random bits: the compiler needs temporaries
    ordered = [p["temporary_bytes"] for p in torch.tpu.program_memory_stats()]
    assert len(ordered) >= 2
    assert ordered == sorted(ordered, reverse=True)
    assert len(torch.tpu.program_memory_stats(limit=1)) == 1


def peak_of(run) -> tuple[int, int]:
    """(peak over the run minus what was allocated before, the run's result kept alive)."""
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    result = run()
    torch.tpu.synchronize()
    return torch.tpu.max_memory_allocated() - before, result


@pytest.mark.strict_mode
def test_strict_peak_includes_the_programs_temporaries(tpu):
    peak, result = peak_of(lambda: torch.randn(512, 384, device=tpu))
    stats = program_named("aten::normal_functional(Float[512, 384]")
    assert stats["temporary_bytes"] > 0
    new_outputs = result.numel() * result.element_size()
    assert peak >= new_outputs + stats["temporary_bytes"]
    assert torch.tpu.memory_stats()["program_temporary_bytes.all.peak"] >= stats["temporary_bytes"]
    # Temporaries are gone after the run; only the results stay.
    assert torch.tpu.memory_allocated() - (torch.tpu.max_memory_allocated() - peak) == new_outputs


def test_fused_graph_peak_is_at_least_its_temporaries_plus_live_buffers(tpu):
    x, w1, w2 = (torch.randn(*shape).to(tpu) for shape in ((192, 160), (160, 352), (352, 96)))
    torch.tpu.synchronize()
    with torch_tpu.eager_mode("defer_and_fuse"):
        torch.tpu.reset_peak_memory_stats()
        before = torch.tpu.memory_allocated()
        # The first product is an intermediate the second matmul reads: a temporary.
        y = ((x @ w1).tanh() @ w2) * 2
        torch.tpu.synchronize()
        peak = torch.tpu.max_memory_allocated()
    # This graph's program: its arguments are x, w1, w2 and the factor 2 (other graphs this
    # process ran read other tensors).
    arguments = sum(t.numel() * t.element_size() for t in (x, w1, w2))
    fused = [p for p in torch.tpu.program_memory_stats() if p["program"].startswith("a fused graph")
             and "aten::tanh" in p["program"] and 0 <= p["argument_bytes"] - arguments <= 16]
    assert fused, torch.tpu.program_memory_stats()
    temporaries = max(p["temporary_bytes"] for p in fused)
    assert temporaries >= 192 * 352 * 4
    assert peak >= before + temporaries + y.numel() * y.element_size()
    torch.testing.assert_close(y.cpu(), ((x.cpu() @ w1.cpu()).tanh() @ w2.cpu()) * 2,
                               atol=1e-4, rtol=1e-4)


def test_compiled_graph_peak_is_at_least_its_temporaries_plus_live_buffers(tpu):
    def step(x, w1, w2):
        return ((x @ w1).sigmoid() @ w2) * 3

    compiled = torch.compile(step, backend="tpu")
    cpu = [torch.randn(*shape) for shape in ((224, 96), (96, 288), (288, 64))]
    x, w1, w2 = (t.to(tpu) for t in cpu)
    compiled(x, w1, w2)  # compiles
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    before = torch.tpu.memory_allocated()
    y = compiled(x, w1, w2)
    torch.tpu.synchronize()
    peak = torch.tpu.max_memory_allocated()
    graphs = [p for p in torch.tpu.program_memory_stats() if p["program"].startswith("compiled")
              and "Float[224, 96]" in p["program"]]
    assert graphs, torch.tpu.program_memory_stats()
    temporaries = max(p["temporary_bytes"] for p in graphs)
    assert temporaries >= 224 * 288 * 4
    assert peak >= before + temporaries + y.numel() * y.element_size()
    torch.testing.assert_close(y.cpu(), step(*cpu), atol=1e-4, rtol=1e-4)


@pytest.mark.strict_mode  # the producers are single ops
def test_memory_snapshot_lists_every_live_buffer_in_cudas_format(tpu):
    torch.tpu.synchronize()
    made = torch.ones(3 * MIB // 4, device=tpu)  # 3 MiB, produced by a fill program
    copied = torch.arange(1000.0).to(tpu)  # a copy to the device
    torch.tpu.synchronize()
    segments = torch.tpu.memory_snapshot()
    assert sum(s["total_size"] for s in segments) == torch.tpu.memory_allocated()
    for segment in segments:
        assert {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable",
                "frames", "blocks", "producer"} <= set(segment)
        block, = segment["blocks"]
        assert block["size"] == segment["total_size"]
        assert block["state"] == "active_allocated"
    by_size = {}
    for segment in segments:
        by_size.setdefault(segment["total_size"], []).append(segment)
    made_segments = by_size[made.numel() * 4]
    assert any(s["producer"] and s["producer"].startswith("aten::fill") for s in made_segments)
    assert all(s["segment_type"] == "large" for s in made_segments)
    assert any(s["producer"] is None for s in by_size[copied.numel() * 4])


@pytest.mark.strict_mode  # the producers are single ops
def test_memory_summary_names_the_largest_buffers_and_programs(tpu):
    keep = torch.zeros(5 * MIB // 4, device=tpu)
    torch.randn(128, 128, device=tpu)
    torch.tpu.synchronize()
    summary = torch.tpu.memory_summary()
    assert "largest live buffers" in summary
    assert "5.00 MiB  aten::zero" in summary
    assert "programs needing the most temporaries while they run:" in summary
    assert keep.sum().item() == 0
