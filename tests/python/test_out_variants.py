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
