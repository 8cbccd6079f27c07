"""torch.optim's fused=True steps (_fused_adam_, _fused_adamw_, _fused_sgd_, _fused_adagrad_) run
on the device, one program for the whole parameter list, and match CPU's fused kernels."""

import pytest
import torch
import torch_tpu

CONFIGS = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "adam_wd_maximize": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, maximize=True,
                                                  fused=True),
    "adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, fused=True),
    "adamw_tensor_lr": lambda p: torch.optim.AdamW(p, lr=torch.tensor(1e-2), fused=True),
    "sgd_plain": lambda p: torch.optim.SGD(p, lr=0.1, fused=True),
    "sgd_nesterov_wd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                                 weight_decay=0.01, fused=True),
    "sgd_dampening": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.3,
                                               fused=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=0.01,
                                             fused=True),
}


def train(make_optimizer, device, dtype=torch.float32, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model = model.to(device=device, dtype=dtype)
    optimizer = make_optimizer(model.parameters())
    x = torch.randn(5, 4).to(device=device, dtype=dtype)
    for _ in range(steps):
        optimizer.zero_grad()
        model(x).float().pow(2).sum().backward()
        optimizer.step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("name", CONFIGS)
def test_fused_step_matches_cpu_without_fallback(name):
    expected = train(CONFIGS[name], "cpu")
    torch_tpu.reset_metrics()
    got = train(CONFIGS[name], "tpu")
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_bfloat16_parameters_update_in_float():
    make = CONFIGS["adamw_amsgrad"]
    expected = train(make, "cpu", torch.bfloat16)
    got = train(make, "tpu", torch.bfloat16)
    for g, e in zip(got, expected):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), e.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("name", ["adam", "sgd_nesterov_wd", "adagrad"])
def test_grad_scaler_unscales_and_skips_non_finite_steps_on_the_device(name):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to("tpu")
    optimizer = CONFIGS[name](model.parameters())
    scaler = torch.amp.GradScaler("tpu", init_scale=4.0)
    x = torch.randn(2, 4, device="tpu")
    scaler.scale(model(x).sum()).backward()
    before = [p.detach().cpu().clone() for p in model.parameters()]
    scaler.step(optimizer)
    scaler.update()
    after = [p.detach().cpu() for p in model.parameters()]
    assert all(not torch.equal(a, b) for a, b in zip(after, before))
    # The gradient the update used is stored back unscaled, as CPU's and CUDA's fused kernels do.
    reference = torch.nn.Linear(4, 3)
    with torch.no_grad():
        reference.weight.copy_(before[0])
        reference.bias.copy_(before[1])
    reference(x.cpu()).sum().backward()
    torch.testing.assert_close(model.weight.grad.cpu(), reference.weight.grad)
    model.weight.grad = None
    scaler.scale(model(x).sum()).backward()
    model.weight.grad[0, 0] = float("inf")
    kept = [p.detach().cpu().clone() for p in model.parameters()]
    scaler.step(optimizer)
    scaler.update()
    for p, k in zip(model.parameters(), kept):
        assert torch.equal(p.detach().cpu(), k)
    assert scaler.get_scale() == 2.0


@pytest.mark.strict_mode
@pytest.mark.parametrize("name", ["adamw_amsgrad", "sgd_nesterov_wd", "adagrad"])
def test_a_fused_step_is_one_program_for_all_parameters(name):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model = model.to("tpu")
    optimizer = CONFIGS[name](model.parameters())
    model(torch.randn(5, 4).to("tpu")).sum().backward()
    optimizer.step()  # the first step also creates the optimizer state
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["execute_count"]
    optimizer.step()
    torch.tpu.synchronize()
    # One program: strict mode records the step (Adam's and Adagrad's step counter increment
    # included) as one fused graph (torch_tpu/_optimizer_steps.py).
    assert torch_tpu.metrics()["execute_count"] - before == 1


@pytest.mark.parametrize("name", ["adamw_amsgrad", "sgd_nesterov_wd"])
def test_parameters_that_are_views_of_one_buffer_all_update(name):
    # Flat-buffer parameters (as FSDP and bucketed DDP make them): each view's step lands.
    def run(device):
        torch.manual_seed(0)
        flat = torch.randn(20).to(device)
        params = [torch.nn.Parameter(flat[:12].view(3, 4)), torch.nn.Parameter(flat[12:])]
        optimizer = CONFIGS[name](params)
        for step in range(2):
            for i, p in enumerate(params):
                p.grad = torch.full_like(p, 0.5 * (i + 1) + step)
            optimizer.step()
        return flat.cpu()

    torch.testing.assert_close(run("tpu"), run("cpu"), rtol=1e-5, atol=1e-6)
