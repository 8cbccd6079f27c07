"""torch.histc lowered natively (a scatter-add into the bins), against PyTorch's CPU counts:
explicit ranges (elements on the edges, outside, NaN), the data's own range, a constant input,
bfloat16, empty input, and CPU's errors."""

import pytest
import torch

import torch_tpu
from conftest import assert_like_cpu, sample

X = torch.cat([sample((40,), torch.float32), torch.tensor([0.0, 1.0, -1.0, 2.5, float("nan")])])


@pytest.mark.parametrize("kwargs", [dict(bins=10, min=-1, max=1), dict(bins=7, min=0, max=2.5),
                                    dict(bins=5), dict(bins=1, min=-100, max=100)])
def test_histc_matches_cpu(kwargs):
    torch_tpu.reset_metrics()
    finite = X[:-1]  # the data's own range needs finite data; explicit ranges skip NaN
    data = finite if "min" not in kwargs else X
    assert_like_cpu(lambda d: torch.histc(data.to(d), **kwargs), rtol=0, atol=0)
    assert_like_cpu(lambda d: torch.histc(data.bfloat16().to(d), **kwargs), rtol=0, atol=0)
    assert_like_cpu(lambda d: torch.histc(data.double().reshape(3, -1)[:, :-1].to(d), **kwargs),
                    rtol=0, atol=0)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_histc_edge_cases_match_cpu():
    assert_like_cpu(lambda d: torch.histc(torch.ones(4, device=d), bins=4), rtol=0, atol=0)
    assert_like_cpu(lambda d: torch.histc(torch.empty(0, device=d), bins=3), rtol=0, atol=0)
    assert_like_cpu(lambda d: torch.histc(torch.arange(3, device=d), bins=3),
                    message="aten::histc: \"histogram_cpu\" not implemented for 'Long'")
    with pytest.raises(RuntimeError, match="bins must be > 0, but got 0"):
        torch.histc(torch.ones(3, device="tpu"), bins=0)
