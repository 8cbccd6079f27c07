"""Device randomness (seeded, reproducible, right distributions) and torch.save/torch.load."""

import io
import math

import pytest
import torch

from conftest import assert_same


def kolmogorov_smirnov(samples: torch.Tensor, cdf) -> float:
    values, _ = torch.sort(samples.double().cpu())
    n = values.numel()
    expected = cdf(values)
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    return max((ranks / n - expected).abs().max().item(),
               (expected - (ranks - 1) / n).abs().max().item())


def normal_cdf(x):
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def test_manual_seed_makes_device_randomness_reproducible():
    torch.manual_seed(1234)
    first = [torch.randn(100, device="tpu").cpu(), torch.rand(7, device="tpu").cpu(),
             torch.randint(0, 100, (50,), device="tpu").cpu()]
    torch.manual_seed(1234)
    second = [torch.randn(100, device="tpu").cpu(), torch.rand(7, device="tpu").cpu(),
              torch.randint(0, 100, (50,), device="tpu").cpu()]
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert not torch.equal(first[0], torch.randn(100, device="tpu").cpu())


def test_rng_state_round_trips():
    state = torch.tpu.get_rng_state()
    a = torch.randn(10, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    b = torch.randn(10, device="tpu").cpu()
    assert torch.equal(a, b)
    torch.tpu.manual_seed(7)
    assert torch.tpu.initial_seed() == 7


def test_explicit_generator():
    generator = torch.Generator(device="tpu")
    generator.manual_seed(99)
    a = torch.randn(20, device="tpu", generator=generator).cpu()
    generator.manual_seed(99)
    b = torch.randn(20, device="tpu", generator=generator).cpu()
    assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_randn_is_standard_normal(dtype):
    torch.manual_seed(0)
    samples = torch.randn(200_000, device="tpu", dtype=dtype)
    assert samples.dtype == dtype
    statistic = kolmogorov_smirnov(samples.float(), normal_cdf)
    # Critical value for n = 200k at alpha = 0.001 is ~0.0044; bf16 rounding adds ~0.004.
    assert statistic < (0.01 if dtype == torch.bfloat16 else 0.0044)
    assert abs(samples.float().mean().item()) < 0.01
    assert abs(samples.float().cpu().std().item() - 1) < 0.01


def test_rand_uniform_bernoulli_and_random_ranges():
    torch.manual_seed(0)
    uniform = torch.rand(100_000, device="tpu")
    assert 0 <= uniform.cpu().min() and uniform.cpu().max() < 1
    assert kolmogorov_smirnov(uniform, lambda x: x.clamp(0, 1)) < 0.01
    low_precision = torch.rand(100_000, device="tpu", dtype=torch.bfloat16).cpu()
    assert low_precision.max() < 1
    ranged = torch.empty(10_000, device="tpu").uniform_(-3, 5).cpu()
    assert -3 <= ranged.min() and ranged.max() < 5
    coins = torch.empty(100_000, device="tpu").bernoulli_(0.3).cpu()
    assert set(coins.unique().tolist()) == {0.0, 1.0}
    assert abs(coins.mean().item() - 0.3) < 0.01
    integers = torch.randint(-4, 9, (10_000,), device="tpu").cpu()
    assert integers.dtype == torch.int64
    assert set(integers.unique().tolist()) == set(range(-4, 9))
    shifted = torch.empty(1000, device="tpu").normal_(5, 0.1).cpu()
    assert abs(shifted.mean().item() - 5) < 0.02


def test_save_and_load_tpu_tensors_and_views():
    x = torch.arange(12.0).reshape(3, 4).to("tpu")
    buffer = io.BytesIO()
    torch.save({"x": x, "row": x[1], "t": x.t()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["x"].device.type == "tpu"
    assert_same(loaded["x"], x.cpu())
    assert_same(loaded["row"], x.cpu()[1])
    assert loaded["row"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert on_cpu["t"].device.type == "cpu"
    torch.testing.assert_close(on_cpu["t"], x.cpu().t())


def test_state_dict_round_trip_both_ways():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    cpu_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("tpu")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location="cpu")
    for key, value in cpu_state.items():
        assert torch.equal(state[key], value)
    buffer = io.BytesIO()
    torch.save(cpu_state, buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location="tpu")
    fresh = torch.nn.Linear(4, 3).to("tpu")
    fresh.load_state_dict(state)
    assert fresh.weight.device.type == "tpu"
    assert torch.equal(fresh.weight.detach().cpu(), cpu_state["weight"])
