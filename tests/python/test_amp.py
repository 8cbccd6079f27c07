"""Mixed precision: torch.autocast("tpu", dtype=torch.bfloat16) and torch.amp.GradScaler("tpu")."""

import torch

import torch_tpu


def test_autocast_runs_matmuls_in_bfloat16_and_reductions_in_float32():
    a = torch.randn(8, 16, device="tpu")
    b = torch.randn(16, 4, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        product = a @ b
        linear = torch.nn.functional.linear(a, b.t())
        total = product.float().sum()
        soft = torch.softmax(product, dim=-1)
        loss = torch.nn.functional.cross_entropy(product, torch.zeros(8, dtype=torch.long, device="tpu"))
    assert product.dtype == torch.bfloat16
    assert linear.dtype == torch.bfloat16
    assert total.dtype == torch.float32
    assert soft.dtype == torch.float32
    assert loss.dtype == torch.float32
    expected = (a.cpu().bfloat16() @ b.cpu().bfloat16())
    torch.testing.assert_close(product.cpu(), expected, atol=0.1, rtol=0.02)
    assert torch.is_autocast_enabled("tpu") is False


def test_grad_scaler_unscales_and_skips_steps_with_infinite_gradients():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to("tpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("tpu", init_scale=1024.0, growth_interval=2)
    x = torch.randn(8, 4, device="tpu")
    before = model.weight.detach().cpu().clone()

    with torch.autocast("tpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert not torch.equal(model.weight.detach().cpu(), before)  # a finite step was taken
    assert scaler.get_scale() == 1024.0

    optimizer.zero_grad()
    stepped = model.weight.detach().cpu().clone()
    loss = model(x).float().pow(2).mean() * float("inf")
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # skipped: the gradients are not finite
    scaler.update()
    assert torch.equal(model.weight.detach().cpu(), stepped)
    assert scaler.get_scale() == 512.0
    assert torch_tpu.metrics()["fallback_ops"].get("aten::_amp_update_scale_") is None
