"""nn.LSTM / nn.GRU and their cells on tpu. ATen's RNN code calls the fused cell kernels
(_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backwards) for every non-CPU device, and
CPU has no kernel for them: without lowerings the modules could not run at all."""

import pytest
import torch
import torch_tpu
from torch import nn

MODULES = {
    "lstm_2_layers": (lambda: nn.LSTM(4, 5, num_layers=2, batch_first=True), (2, 3, 4)),
    "lstm_no_bias": (lambda: nn.LSTM(4, 5, bias=False), (3, 2, 4)),
    "lstm_bidirectional_projected": (lambda: nn.LSTM(4, 5, bidirectional=True, proj_size=3),
                                     (3, 2, 4)),
    "gru_2_layers": (lambda: nn.GRU(4, 5, num_layers=2), (3, 2, 4)),
    "gru_no_bias": (lambda: nn.GRU(4, 5, bias=False, batch_first=True), (2, 3, 4)),
    "gru_bidirectional": (lambda: nn.GRU(4, 5, bidirectional=True), (3, 2, 4)),
}


def run(make, shape, device):
    """Output, input gradient and parameter gradients of one forward/backward on `device`."""
    torch.manual_seed(0)
    module = make().to(device)
    x = torch.randn(*shape).to(device).requires_grad_()
    out, state = module(x)
    last = state[0] if isinstance(state, tuple) else state
    (out.pow(2).sum() + last.sum()).backward()
    return [out.detach().cpu(), x.grad.cpu()] + [p.grad.cpu() for p in module.parameters()]


@pytest.mark.parametrize("name", MODULES)
def test_recurrent_module_matches_cpu_without_fallback(name):
    make, shape = MODULES[name]
    expected = run(make, shape, "cpu")
    torch_tpu.reset_metrics()
    got = run(make, shape, "tpu")
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell])
def test_cells_with_given_state(cell):
    torch.manual_seed(1)
    module = cell(4, 6)
    x, h = torch.randn(3, 4), torch.randn(3, 6)
    state = (h, torch.randn(3, 6)) if cell is nn.LSTMCell else h
    expected = module(x, state)
    torch_tpu.reset_metrics()
    moved = tuple(s.to("tpu") for s in state) if cell is nn.LSTMCell else state.to("tpu")
    got = module.to("tpu")(x.to("tpu"), moved)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-6)


def test_bfloat16_lstm_computes_gates_in_float():
    torch.manual_seed(2)
    module = nn.LSTM(4, 5).to(torch.bfloat16)
    x = torch.randn(3, 2, 4, dtype=torch.bfloat16)
    reference, _ = module.float()(x.float())
    got, _ = module.to(torch.bfloat16).to("tpu")(x.to("tpu"))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu().float(), reference, rtol=2e-2, atol=2e-2)
