"""torch_tpu.metrics(): which counters exist and what increments them."""

import pytest
import torch

import torch_tpu

# Counts strict mode's per-op programs.
pytestmark = pytest.mark.strict_mode


def test_metrics_counts_compiles_and_cache_hits(tpu):
    x = torch.randn(7, 3, device=tpu)
    torch_tpu.reset_metrics()
    for alpha in (0.5, 1.5, 2.5):  # alpha is a runtime argument: one compile
        x.add(x, alpha=alpha)
    metrics = torch_tpu.metrics()
    assert metrics["execute_count"] == 3
    assert metrics["compile_count"] <= 1
    assert metrics["cache_hits_memory"] >= 2
    assert metrics["fallback_ops"] == {}
    assert "execute_count" in torch_tpu.metrics_report()


def test_metrics_lists_exactly_the_counted_counters():
    # Counters nothing increments yet (fusion) stay out until something counts
    # them; a tool reading a permanent zero would be misled.
    assert set(torch_tpu.metrics()) == {
        "compile_count", "compile_seconds", "quick_compiles", "tier_up_compiles",
        "tier_up_seconds", "tiered_up_programs", "execute_count", "cache_hits_memory",
        "cache_hits_shared", "cache_hits_remote", "cache_misses", "cache_corrupt_entries",
        "cache_preloaded", "transfer_to_device_bytes", "transfer_to_host_bytes", "fallback_ops",
        "donated_buffers", "donated_bytes", "fused_graphs", "fused_ops", "fused_programs",
        "fused_bucketed_ops", "fused_replays", "fuse_cuts", "device_collectives"}


def test_learning_rate_changes_do_not_recompile(tpu):
    parameter = torch.randn(10, device=tpu)
    gradient = torch.randn(10, device=tpu)
    parameter.add_(gradient, alpha=-0.1)
    torch_tpu.reset_metrics()
    for lr in (0.01, 0.02, 0.03, 0.04):
        parameter.add_(gradient, alpha=-lr)
    assert torch_tpu.metrics()["compile_count"] == 0
