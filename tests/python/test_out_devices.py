"""Ops never write a tpu result into a CPU tensor (out= or in-place) nor read non-scalar CPU
inputs into a tpu output: a clear RuntimeError as on CUDA, lowered and CPU-fallback ops alike."""

import warnings

import pytest
import torch

from conftest import assert_raises_exactly, assert_same
from cpu_only_ops import define_cpu_only_op

out_devices_example = define_cpu_only_op("out_devices_example")
X = torch.tensor([[0.0, 1.0], [2.0, 0.0]])


def message(op, argument, written=True):
    kind = "the written-to argument" if written else "argument"
    return (f"{op}: expected all tensors to be on the same device, but found at least two "
            f"devices, tpu:0 and cpu ({kind} '{argument}')")


MISMATCHES = {
    "nonzero_out_cpu": (lambda: torch.nonzero(X.to("tpu"), out=torch.empty(0, dtype=torch.long)),
                        message("nonzero", "out")),
    "nonzero_cpu_input_tpu_out": (
        lambda: torch.nonzero(X, out=torch.empty(0, dtype=torch.long, device="tpu")),
        message("nonzero", "self", written=False)),
    "masked_select_out_cpu": (
        lambda: torch.masked_select(X.to("tpu"), X.to("tpu") > 0, out=torch.empty(0)),
        message("masked_select", "out")),
    "add_out_cpu": (lambda: torch.add(X.to("tpu"), 1, out=torch.empty(2, 2)),
                    message("add", "out")),
    "fallback_op_out_cpu": (lambda: out_devices_example(X.to("tpu"), X.to("tpu"),
                                                        out=torch.empty(2, 2)),
                            message("out_devices_example", "out")),
    "cpu_self_in_place": (lambda: X.clone().add_(X.to("tpu")), message("add_", "self")),
    "cat_cpu_inputs_tpu_out": (lambda: torch.cat([X, X], out=torch.empty(0, device="tpu")),
                               message("cat", "tensors", written=False)),
}


@pytest.mark.parametrize("name", sorted(MISMATCHES))
def test_device_mismatch_of_written_tensors_raises(name):
    assert_raises_exactly(RuntimeError, MISMATCHES[name][1], MISMATCHES[name][0])


def test_out_on_tpu_and_cpu_scalars_still_work():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.empty(0, dtype=torch.long, device="tpu")
        assert torch.nonzero(X.to("tpu"), out=out) is out
        assert_same(out, torch.nonzero(X))
        result = torch.add(X.to("tpu"), torch.tensor(1.0), out=torch.empty(2, 2, device="tpu"))
        assert_same(result, X + 1)
