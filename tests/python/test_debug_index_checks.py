"""Debug mode (TORCH_TPU_LAUNCH_BLOCKING=1, read once per process) checks indices on the host side:
out-of-range indices raise IndexError naming the op, the index and the bound; integer division by
zero raises CPU's "ZeroDivisionError"; valid programs run and match CPU."""

import json

import pytest

from conftest import run_python

CASES = r'''
import json, warnings
import torch, torch.nn.functional as F
import torch_tpu
assert torch_tpu._C._debug_mode()
warnings.simplefilter("ignore")

def cases(d):
    z = lambda *s: torch.zeros(*s, device=d)
    I = lambda *v: torch.tensor(v, device=d)
    cube = torch.arange(24.0, device=d).reshape(2, 3, 4)
    mask = torch.tensor([[True, False, True], [False, True, True]], device=d)
    logits = torch.linspace(-1, 1, 6, device=d).reshape(2, 3)
    one, two = torch.tensor(1.0, device=d), torch.tensor(2.0, device=d)
    return {
        "scatter_reduce": lambda: z(3).scatter_reduce_(0, I(3), z(1), "amax"),
        "scatter_reduce_negative": lambda: z(3).scatter_reduce(0, I(-1), z(1), "sum"),
        "scatter_reduce_ok": lambda: z(3).scatter_reduce(0, I(2, 0), I(1.0, 2.0), "sum"),
        "index_reduce": lambda: z(3).index_reduce_(0, I(3), z(1), "prod"),
        "index_reduce_negative": lambda: z(3).index_reduce(0, I(-1), z(1), "prod"),
        "index_reduce_ok": lambda: (z(3) + 2).index_reduce(0, I(2, 2), I(3.0, 4.0), "prod"),
        "index_copy": lambda: z(3).index_copy_(0, I(3), z(1)),
        "index_copy_negative": lambda: z(3).index_copy(0, I(-1), z(1)),
        "index_copy_ok": lambda: z(3).index_copy(0, I(2), I(5.0)),
        "index_fill": lambda: z(3).index_fill_(0, I(3), 1.0),
        "index_fill_negative": lambda: z(3).index_fill(0, I(-4), 1.0),
        "index_fill_negative_ok": lambda: z(3).index_fill(0, I(-1), 1.0),
        "put": lambda: z(3).put_(I(3), I(1.0)),
        "put_negative": lambda: z(3).put(I(-4), I(1.0)),
        "put_negative_ok": lambda: z(3).put(I(-3), I(1.0)),
        "take": lambda: torch.take(z(3), I(3)),
        "take_negative_ok": lambda: torch.take(torch.arange(3.0, device=d), I(-3)),
        "nll_loss": lambda: F.nll_loss(z(2, 3), I(0, 3)),
        "nll_loss_negative": lambda: F.nll_loss(z(2, 3), I(0, -1)),
        "nll_loss_ignored": lambda: F.nll_loss(logits, I(1, -100)),
        "nll_loss_ignore_index": lambda: F.nll_loss(z(2, 3), I(0, 5), ignore_index=5),
        "nll_loss2d": lambda: F.nll_loss(z(1, 3, 2, 2), I([[0, 1], [2, 3]])),
        "nll_loss2d_ignored": lambda: F.nll_loss(z(1, 3, 2, 2) + 1, I([[0, 1], [2, -100]])),
        "nll_loss_backward": lambda: torch.ops.aten.nll_loss_backward(one, z(2, 3), I(0, 3), None, 1,
                                                                      -100, two),
        "cross_entropy": lambda: F.cross_entropy(z(2, 3), I(0, 3)),
        "cross_entropy_ignored": lambda: F.cross_entropy(z(2, 3), I(0, -100)),
        "cross_entropy_smoothing": lambda: F.cross_entropy(z(2, 3), I(0, 3), label_smoothing=0.1),
        "div_floor": lambda: torch.div(I(1, 2), I(1, 0), rounding_mode="floor"),
        "div_trunc_inplace": lambda: I(1, 2).div_(I(1, 0), rounding_mode="trunc"),
        "div_true_ok": lambda: torch.div(I(1, 2), I(1, 0)),
        "div_float_floor_ok": lambda: torch.div(I(1.0, 2.0), I(1.0, 0.0), rounding_mode="floor"),
        "div_scalar": lambda: torch.div(I(1, 2), 0, rounding_mode="floor"),
        "floor_divide": lambda: I(1, 2) // I(1, 0),
        "floor_divide_scalar": lambda: I(1, 2) // 0,
        "remainder": lambda: I(1, 2) % I(0, 1),
        "remainder_scalar": lambda: torch.remainder(I(1, 2), 0),
        "fmod": lambda: torch.fmod(I(1, 2), I(1, 0)),
        "fmod_ok": lambda: torch.fmod(I(7, -7), I(3, 3)),
        "mask_then_index_ok": lambda: cube[mask, I(3)],
        "mask_then_indices_ok": lambda: cube[mask, I(3, 0, 1, 1)],
        "mask_then_index_bad": lambda: cube[mask, I(4)],
        "int_then_mask_ok": lambda: cube[I(1), :, torch.tensor([True, False, True, True], device=d)],
        "cpu_index_bad": lambda: cube[torch.tensor([2])],
    }

def outcome(function, device):
    try:
        result = function()
        return {"result": result.cpu().tolist()}
    except Exception as error:
        return {"type": type(error).__name__, "message": str(error).split("\n")[0]}

names = cases("cpu")
report = {name: {"cpu": outcome(cases("cpu")[name], "cpu"), "tpu": outcome(cases("tpu")[name], "tpu")}
          for name in names}
report["_embedding_backward"] = outcome(lambda: torch.ops.aten.embedding_dense_backward(
    torch.ones(2, 2, device="tpu"), torch.tensor([1, 3], device="tpu"), 3, -1, False), "tpu")
report["_embedding_backward_padding"] = outcome(lambda: torch.ops.aten.embedding_dense_backward(
    torch.ones(2, 2, device="tpu"), torch.tensor([1, 3], device="tpu"), 3, 3, False), "tpu")
print(json.dumps(report))
'''

WHY = " (checked because TORCH_TPU_LAUNCH_BLOCKING=1)"
# Our messages name the op, the bad index and the bound.
MESSAGES = {
    "scatter_reduce": "scatter_reduce.two: index 3 is out of bounds for dimension 0 with size 3",
    "scatter_reduce_negative": "scatter_reduce.two: index -1 is out of bounds for dimension 0 with size 3",
    "index_reduce": "index_reduce: index 3 is out of bounds for dimension 0 with size 3",
    "index_reduce_negative": "index_reduce: index -1 is out of bounds for dimension 0 with size 3",
    "index_copy": "index_copy: index 3 is out of bounds for dimension 0 with size 3",
    "index_copy_negative": "index_copy: index -1 is out of bounds for dimension 0 with size 3",
    "index_fill": "index_fill.int_Scalar: index 3 is out of bounds for dimension 0 with size 3",
    "index_fill_negative": "index_fill.int_Scalar: index -4 is out of bounds for dimension 0 with size 3",
    "put": "put: index 3 is out of bounds for dimension 0 with size 3",
    "put_negative": "put: index -4 is out of bounds for dimension 0 with size 3",
    "take": "take: index 3 is out of bounds for dimension 0 with size 3",
    "nll_loss": "nll_loss_forward: target 3 is out of bounds for dimension 1 with size 3",
    "nll_loss_negative": "nll_loss_forward: target -1 is out of bounds for dimension 1 with size 3",
    "nll_loss2d": "nll_loss2d_forward: target 3 is out of bounds for dimension 1 with size 3",
    "nll_loss_backward": "nll_loss_backward: target 3 is out of bounds for dimension 1 with size 3",
    "cross_entropy": "nll_loss_forward: target 3 is out of bounds for dimension 1 with size 3",
    "cross_entropy_smoothing": "nll_loss_forward: target 3 is out of bounds for dimension 1 with size 3",
    "div_floor": "ZeroDivisionError: div.Tensor_mode: integer division by zero",
    "div_trunc_inplace": "ZeroDivisionError: div.Tensor_mode: integer division by zero",
    "div_scalar": "ZeroDivisionError: div.Tensor_mode: integer division by zero",
    "floor_divide": "ZeroDivisionError: floor_divide: integer division by zero",
    "floor_divide_scalar": "ZeroDivisionError: floor_divide: integer division by zero",
    "remainder": "ZeroDivisionError: remainder.Tensor: integer division by zero",
    "remainder_scalar": "ZeroDivisionError: remainder.Scalar: integer division by zero",
    "fmod": "ZeroDivisionError: fmod.Tensor: integer division by zero",
    "mask_then_index_bad": "index.Tensor: index 4 is out of bounds for dimension 2 with size 4",
    "cpu_index_bad": "index.Tensor: index 2 is out of bounds for dimension 0 with size 2",
}
# CPU raises RuntimeError for out-of-range gather/scatter indices; debug mode raises IndexError
# for every out-of-range index.
INDEX_ERROR_WHERE_CPU_SAYS_RUNTIME_ERROR = {"scatter_reduce", "scatter_reduce_negative"}


@pytest.fixture(scope="module")
def report():
    result = run_python(CASES, TORCH_TPU_LAUNCH_BLOCKING="1")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def case_names():
    return sorted(line.split('"')[1] for line in CASES.splitlines()
                  if line.startswith('        "') and '": lambda' in line)


@pytest.mark.parametrize("name", case_names())
def test_debug_mode_matches_cpu(report, name):
    cpu, tpu = report[name]["cpu"], report[name]["tpu"]
    if "result" in cpu:
        assert tpu == cpu  # a valid program runs and gives CPU's values
        return
    expected_type = "IndexError" if name in INDEX_ERROR_WHERE_CPU_SAYS_RUNTIME_ERROR else cpu["type"]
    assert tpu.get("type") == expected_type, tpu
    assert tpu["message"] == MESSAGES[name] + WHY


def test_embedding_backward_checks_indices_except_padding(report):
    # CPU's kernel does not check here (it writes out of bounds); debug mode does.
    assert report["_embedding_backward"] == {
        "type": "IndexError",
        "message": "embedding_dense_backward: index 3 is out of bounds for dimension 0 with size 3" + WHY}
    assert report["_embedding_backward_padding"] == {"result": [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]}
