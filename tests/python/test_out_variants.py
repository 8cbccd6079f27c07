"""out= overloads of lowered ops run natively: zero-size out tensors are resized, returned, and
hold CPU's values (what the OpInfo `out` pass checks, here for overloads it found falling back)."""

import torch
import torch_tpu


def _check_out(call, *outs_like):
    """call(out=...) with zero-size outs on tpu and on CPU: same values, the outs returned."""
    def outs(device):
        made = tuple(torch.empty(0, dtype=like.dtype, device=device) for like in outs_like)
        return made if len(made) > 1 else made[0]

    expected_outs = outs("cpu")
    expected = call("cpu", expected_outs)
    tpu_outs = outs("tpu")
    torch_tpu.reset_metrics()
    returned = call("tpu", tpu_outs)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    if isinstance(tpu_outs, torch.Tensor):
        assert returned is tpu_outs
        tpu_outs, expected_outs = (tpu_outs,), (expected_outs,)
    for got, want in zip(tpu_outs, expected_outs):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
    return expected


def test_full_reductions_to_out():
    x = torch.tensor([[3.0, -1.0, 7.5], [0.0, 2.0, -4.0]])
    mask = torch.tensor([[True, False, True], [True, True, True]])
    _check_out(lambda d, out: torch.max(x.to(d), out=out), x[0, 0])
    _check_out(lambda d, out: torch.min(x.to(d), out=out), x[0, 0])
    _check_out(lambda d, out: torch.all(mask.to(d), out=out), mask[0, 0])
    _check_out(lambda d, out: torch.any(mask.to(d), out=out), mask[0, 0])


def test_log_sigmoid_forward_to_out():
    """The output as CPU's; the buffer stays empty, as CUDA leaves it (backward ignores it)."""
    x = torch.linspace(-30, 30, 7)
    output, buffer = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    torch_tpu.reset_metrics()
    returned = torch.ops.aten.log_sigmoid_forward.output(x.to("tpu"), output=output,
                                                          buffer=buffer)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert returned[0] is output and returned[1] is buffer
    assert buffer.shape == (0,)
    torch.testing.assert_close(output.cpu(), torch.nn.functional.logsigmoid(x))


def test_cummax_and_avg_pool3d_to_out():
    x = torch.tensor([[1.0, 3.0, 2.0, 3.0], [0.5, -1.0, 4.0, 4.0]])
    _check_out(lambda d, out: torch.cummin(x.to(d), 1, out=out), x, torch.zeros(1, dtype=torch.long))
    volume = torch.arange(2 * 4 * 4 * 4, dtype=torch.float32).reshape(2, 4, 4, 4)
    _check_out(lambda d, out: torch.ops.aten.avg_pool3d.out(volume.to(d), [2, 2, 2], out=out),
               volume)


def test_composite_functionals_with_cpu_out_kernels_to_out():
    """mvlgamma and narrow_copy: composite functional forms, out= kernels of CPU's own."""
    x = torch.tensor([[2.5, 3.0, 1.75], [4.0, 1.6, 9.0]])
    for p in (1, 3):
        _check_out(lambda d, out: torch.mvlgamma(x.to(d), p, out=out), x)
    _check_out(lambda d, out: torch.ops.aten.narrow_copy.out(x.to(d), 1, -2, 2, out=out), x)
    _check_out(lambda d, out: torch.ops.aten.narrow_copy.out(x.to(d), 0, 1, 1, out=out), x)


def test_nonzero_and_masked_select_resize_out_to_the_count():
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    _check_out(lambda d, out: torch.nonzero(x.to(d), out=out), torch.zeros(1, dtype=torch.long))
    _check_out(lambda d, out: torch.masked_select(x.to(d), (x > 0).to(d), out=out), x)
    _check_out(lambda d, out: torch.masked_select(x.to(d), torch.tensor([True, False, True],
                                                                          device=d), out=out), x)
    _check_out(lambda d, out: torch.nonzero(torch.zeros(2, 3, device=d), out=out),
               torch.zeros(1, dtype=torch.long))


def test_batch_norm_to_out_updates_running_statistics():
    x = torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(0))
    weight, bias = torch.tensor([1.5, -0.5]), torch.tensor([0.25, 1.0])
    for op in (torch.ops.aten.native_batch_norm.out, torch.ops.aten._native_batch_norm_legit.out):
        for training in (True, False):
            stats = {}

            def call(d, outs, op=op, training=training):
                stats[d] = (torch.tensor([0.5, -1.0], device=d), torch.tensor([2.0, 0.5], device=d))
                return op(x.to(d), weight.to(d), bias.to(d), *stats[d], training, 0.1, 1e-5,
                          out=outs[0], save_mean=outs[1], save_invstd=outs[2])

            _check_out(call, x, x, x)
            for got, want in zip(stats["tpu"], stats["cpu"]):
                torch.testing.assert_close(got.cpu(), want)
    _check_out(lambda d, outs: torch.ops.aten._native_batch_norm_legit.no_stats_out(
        x.to(d), weight.to(d), bias.to(d), True, 0.1, 1e-5, out=outs[0], save_mean=outs[1],
        save_invstd=outs[2]), x, x, x)


def test_bernoulli_to_out_draws_on_the_device():
    p = torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 0.25]]).repeat(50, 1)
    out = torch.empty(0, device="tpu")
    torch_tpu.reset_metrics()
    returned = torch.bernoulli(p.to("tpu"), out=out)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert returned is out and out.shape == p.shape
    drawn = out.cpu()
    assert torch.equal(drawn[p == 0], torch.zeros_like(drawn[p == 0]))
    assert torch.equal(drawn[p == 1], torch.ones_like(drawn[p == 1]))
    assert 0.3 < drawn[p == 0.5].mean() < 0.7


def test_hash_tensor_to_out():
    x = torch.tensor([[3.0, -1.0, 7.5], [0.0, 2.0, -4.0]])
    _check_out(lambda d, out: torch.hash_tensor(x.to(d), dim=1, out=out),
               torch.zeros(1, dtype=torch.uint64))
