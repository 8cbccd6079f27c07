"""Asynchronous device failures: reported once, at a sync point, naming the op; storages recover."""

import pytest
import torch

import torch_tpu


def test_async_failure_names_the_op_and_is_raised_once():
    x = torch.ones(1000, device="tpu")
    torch_tpu._C._fail_storage(x, "injected device fault")
    result = (x * 2).sum()  # kept alive: DeferAndFuse never runs work whose results are dead
    with pytest.raises(RuntimeError) as error:
        torch.tpu.synchronize()
    message = str(error.value)
    assert "injected device fault" in message
    if torch_tpu.get_eager_mode() == "defer_and_fuse":
        assert "a fused graph of 2 ops (aten::mul.Tensor, aten::sum)" in message
    else:
        assert "aten::mul.Tensor(Float[1000]" in message or "aten::mul.Scalar(Float[1000]" in message
    del result
    torch.tpu.synchronize()  # already reported: not raised again


def test_storage_whose_last_write_failed_is_usable_after_it_is_overwritten():
    for overwrite in (lambda t: t.fill_(3.0), lambda t: t.copy_(torch.full((8,), 3.0)),
                      lambda t: t.copy_(torch.full((8,), 3.0, device="tpu"))):
        x = torch.ones(8, device="tpu")
        torch_tpu._C._fail_storage(x, "injected device fault")
        overwrite(x)  # never reads the failed buffer, so nothing fails
        assert torch.equal(x.cpu(), torch.full((8,), 3.0))
        torch.tpu.synchronize()


def test_resize_work_is_tracked_by_synchronize():
    x = torch.arange(4.0, device="tpu")
    torch_tpu._C._fail_storage(x, "injected device fault")
    x.resize_(100)
    with pytest.raises(RuntimeError, match="resize_.*injected device fault"):
        torch.tpu.synchronize()


def test_builder_errors_name_the_op_and_inputs():
    x = torch.ones(2, 3, device="tpu")
    with pytest.raises(RuntimeError) as cpu_error:
        torch.ones(2, 3) @ torch.ones(2, 3)
    with pytest.raises(RuntimeError) as tpu_error:
        x @ x
    assert str(tpu_error.value) == "aten::mm: " + str(cpu_error.value)
