"""Device randomness: seeded, reproducible, right distributions."""

import math

import pytest
import torch
import torch_tpu
from conftest import assert_like_cpu


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


def _error_of(call):
    with pytest.raises(Exception) as caught:
        call()
    return type(caught.value), str(caught.value).split("\n")[0]


BAD_STATES = {
    "on_tpu": lambda state: state.to("tpu"),
    "not_uint8": lambda state: state.float(),
    "not_contiguous": lambda state: torch.stack([state, state], 1)[:, 0],
}


@pytest.mark.parametrize("case", sorted(BAD_STATES))
def test_set_rng_state_rejects_what_cpu_and_cuda_generators_reject(case):
    # CPU's and CUDA's generators check a new state alike (at::detail::check_rng_state): a CPU
    # ByteTensor (TypeError otherwise, a state on the device included), contiguous.
    torch.tpu.manual_seed(5)
    state = BAD_STATES[case](torch.tpu.get_rng_state())
    expected = _error_of(lambda: torch.Generator().set_state(state))
    torch.tpu.manual_seed(11)
    assert _error_of(lambda: torch.tpu.set_rng_state(state)) == expected
    assert _error_of(lambda: torch.tpu.set_rng_state_all([state])) == expected
    generator = torch.Generator("tpu").manual_seed(11)
    assert _error_of(lambda: generator.set_state(state)) == expected
    # Nothing was restored: the generators still draw what seed 11 gives.
    drawn = torch.randn(8, device="tpu").cpu()
    torch.tpu.manual_seed(11)
    assert torch.equal(drawn, torch.randn(8, device="tpu").cpu())
    assert torch.equal(torch.randn(8, device="tpu", generator=generator).cpu(), drawn)


def test_set_rng_state_sizes_are_cudas():
    # CUDA's generator takes its 16-byte state (seed, offset) or the seed alone (offset 0), and
    # raises "RNG state is wrong size" (its exact text) for anything else.
    torch.tpu.manual_seed(21)
    state = torch.tpu.get_rng_state()
    for wrong in (state[:4], torch.cat([state, state])):
        assert _error_of(lambda: torch.tpu.set_rng_state(wrong)) == (
            RuntimeError, "RNG state is wrong size")
    expected = torch.randn(8, device="tpu").cpu()
    torch.randn(8, device="tpu")
    torch.tpu.set_rng_state(state[:8].clone())
    assert torch.equal(torch.randn(8, device="tpu").cpu(), expected)


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


def test_normal_with_tensor_parameters():
    import torch_tpu
    torch.manual_seed(7)
    torch_tpu.reset_metrics()
    mean = torch.tensor([[-5.0], [10.0]], device="tpu")
    std = torch.tensor([1.0, 3.0, 0.5], device="tpu")
    draws = torch.normal(mean.expand(2, 3).reshape(2, 3, 1).expand(2, 3, 4000),
                         std.reshape(1, 3, 1).expand(2, 3, 4000))
    assert draws.shape == (2, 3, 4000) and draws.device.type == "tpu"
    z = ((draws - mean.reshape(2, 1, 1)) / std.reshape(1, 3, 1)).flatten()
    assert kolmogorov_smirnov(z, normal_cdf) < 0.02
    assert torch.normal(mean, 2.0).shape == (2, 1)
    assert torch.normal(1.0, std).shape == (3,)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        torch.normal(mean, -std[:1]).cpu()


def test_multinomial_draws_match_the_distribution():
    import torch_tpu
    torch.manual_seed(3)
    torch_tpu.reset_metrics()
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 1.0, 1.0]], device="tpu")
    draws = torch.multinomial(p, 20000, replacement=True).cpu()
    assert draws.shape == (2, 20000) and draws.dtype == torch.int64
    frequencies = torch.stack([torch.bincount(row, minlength=4) for row in draws]) / 20000
    expected = (p / p.sum(1, keepdim=True)).cpu()
    assert (frequencies - expected).abs().max() < 0.02
    without = torch.multinomial(p, 3).cpu()
    assert all(len(set(row.tolist())) == 3 for row in without)
    assert 1 not in without[0].tolist()  # zero probability is never drawn
    assert torch_tpu.metrics()["fallback_ops"] == {}
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(p, 5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32,
                                   torch.float16, torch.bfloat16])
def test_randperm_is_a_device_permutation_repeatable_by_seed(dtype):
    torch_tpu.reset_metrics()
    n = 200
    torch.manual_seed(5)
    first = torch.randperm(n, dtype=dtype, device="tpu")
    second = torch.randperm(n, dtype=dtype, device="tpu")
    torch.manual_seed(5)
    again = torch.randperm(n, dtype=dtype, device="tpu")
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert first.dtype == dtype and first.device.type == "tpu"
    assert torch.equal(first.cpu().sort().values, torch.arange(n, dtype=dtype))
    assert torch.equal(first.cpu(), again.cpu())
    assert not torch.equal(first.cpu(), second.cpu())
    generator = torch.Generator(device="tpu").manual_seed(5)
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.randperm(n, generator=generator, out=out)
    assert torch.equal(out.cpu().sort().values, torch.arange(n, dtype=dtype))


@pytest.mark.parametrize("n, dtype", [(129, torch.int8), (257, torch.uint8), (2050, torch.float16),
                                      (2**24 + 2, torch.float32), (3, torch.bool), (-1, torch.int64)])
def test_randperm_rejects_what_cpu_rejects(n, dtype):
    assert_like_cpu(lambda d: torch.randperm(n, dtype=dtype, device=d))


def test_rrelu_with_noise_writes_noise_like_cpu():
    """Evaluation: leaky_relu with the mean slope, noise untouched (as on CPU). Training: each
    x <= 0 gets its own slope in [lower, upper), recorded in noise; noise is 1 elsewhere."""
    import torch_tpu

    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0, float("nan")]).repeat(200)
    torch_tpu.reset_metrics()
    for lower, upper in ((0.125, 1 / 3), (0.1, 0.3)):
        cpu_noise = torch.full_like(x, 7.0)
        noise = cpu_noise.to("tpu")
        want = torch.ops.aten.rrelu_with_noise(x, cpu_noise, lower, upper, False)
        got = torch.ops.aten.rrelu_with_noise(x.to("tpu"), noise, lower, upper, False)
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(noise.cpu(), cpu_noise)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        source = x.to(dtype)
        noise = torch.zeros_like(source, device="tpu")
        out = torch.ops.aten.rrelu_with_noise(source.to("tpu"), noise, 0.1, 0.3, True).cpu()
        cpu_noise = torch.zeros_like(source)
        torch.ops.aten.rrelu_with_noise(source, cpu_noise, 0.1, 0.3, True)
        slopes = noise.cpu()
        assert out.dtype == slopes.dtype == dtype
        assert torch.equal(slopes == 1, cpu_noise == 1)
        negative = source <= 0
        drawn = slopes[negative]
        low, high = torch.tensor([0.1, 0.3], dtype=dtype)  # the bounds as the dtype rounds them
        assert low <= drawn.min() and drawn.max() <= high
        assert abs(drawn.double().mean() - 0.2) < 0.02
        assert len(drawn.unique()) > 100
        assert torch.equal(out[negative], (source[negative] * slopes[negative]))
        torch.testing.assert_close(out[~negative], source[~negative], equal_nan=True)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_rrelu_in_place_and_backward_use_the_drawn_slopes():
    import torch_tpu

    x = torch.tensor([-2.0, -0.5, 0.25, 3.0]).repeat(50).to("tpu")
    torch_tpu.reset_metrics()
    y = x.clone()
    torch.nn.functional.rrelu(y, 0.2, 0.4, training=True, inplace=True)
    ratio = (y / x).cpu()
    negative = x.cpu() < 0
    assert torch.equal(ratio[~negative], torch.ones_like(ratio[~negative]))
    assert 0.2 <= ratio[negative].min() and ratio[negative].max() <= 0.4
    leaf = x.clone().requires_grad_()
    out = torch.nn.functional.rrelu(leaf, 0.2, 0.4, training=True)
    out.sum().backward()
    torch.testing.assert_close(leaf.grad.cpu(), (out / leaf).detach().cpu())
    assert torch_tpu.metrics()["fallback_ops"] == {}


def _dropout_block_gradients(device, checkpointed, use_reentrant):
    """A dropout block's output and gradients, the block run plainly or under activation
    checkpointing (whose backward recomputes the dropout)."""
    from torch.utils.checkpoint import checkpoint

    generator = torch.Generator().manual_seed(3)
    x = torch.randn(16, 32, generator=generator).to(device).requires_grad_()
    w = torch.randn(16, 32, generator=generator).to(device).requires_grad_()

    def block(y):
        return torch.nn.functional.dropout(y, 0.5).tanh() * w

    torch.manual_seed(0)
    out = checkpoint(block, x, use_reentrant=use_reentrant) if checkpointed else block(x)
    out.sum().backward()
    return out.detach().cpu(), x.grad.cpu(), w.grad.cpu()


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_checkpointed_dropout_recomputes_the_forward_mask(device, use_reentrant):
    # torch.utils.checkpoint stashes the device's RNG state for the recomputation only when the
    # device module's `_initialized` is true; a new mask would give other gradients.
    plain = _dropout_block_gradients(device, False, use_reentrant)
    checkpointed = _dropout_block_gradients(device, True, use_reentrant)
    for got, want in zip(checkpointed, plain):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # The backward's (recomputed) mask is the forward's: the gradients are zero exactly where the
    # output is.
    out, x_grad, w_grad = checkpointed
    assert 0 < (out == 0).sum() < out.numel()
    assert torch.equal(x_grad == 0, out == 0)
    assert torch.equal(w_grad == 0, out == 0)
