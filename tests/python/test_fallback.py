"""The counted, warned CPU fallback for ops without a lowering."""

from pathlib import Path

import pytest
import torch

import torch_tpu
from conftest import run_python
from cpu_only_ops import define_cpu_only_op
from torch_tpu import _C

fallback_example = define_cpu_only_op("fallback_example")

# ATen ops a user calls from Python get the fallback's warning as a Python UserWarning. The test
# takes the first of these that has no lowering yet, so lowering one of them changes nothing here.
UNLOWERED_ATEN_CANDIDATES = [
    ("aten::special_airy_ai.out", torch.special.airy_ai),
    ("aten::special_bessel_j0.out", torch.special.bessel_j0),
    ("aten::special_bessel_y1.out", torch.special.bessel_y1),
    ("aten::special_laguerre_polynomial_l.out",
     lambda x: torch.special.laguerre_polynomial_l(x, 3)),
    ("aten::hash_tensor.out", torch.hash_tensor),
    ("aten::_linalg_eigvals", lambda x: torch.linalg.eigvals(torch.diag(x))),
    ("aten::_standard_gamma_grad", lambda x: torch._standard_gamma_grad(x, x + 1)),
    ("aten::_weight_norm_interface", lambda x: torch._weight_norm_interface(x, x, 0)[0]),
]


def test_unlowered_aten_op_falls_back_with_one_python_warning_and_a_count(tpu):
    candidates = [(n, f) for n, f in UNLOWERED_ATEN_CANDIDATES if not _C._has_lowering(n)]
    assert candidates, "every candidate is lowered now: add an unlowered ATen op to the list"
    name, op = candidates[0]
    x = torch.tensor([1.0, 4.0, 9.0], device=tpu)
    torch_tpu.reset_metrics()
    with pytest.warns(UserWarning, match=name.split(".")[0]):
        first = op(x)
    second = op(x)
    assert first.device.type == "tpu"
    torch.testing.assert_close(second.cpu(), op(x.cpu()))
    assert torch_tpu.metrics()["fallback_ops"] == {name: 2}


def test_op_without_tpu_kernel_falls_back_with_one_warning_and_a_count(tpu, capfd):
    x = torch.tensor([1.0, 4.0, 9.0], device=tpu)
    y = torch.tensor([0.5, -1.0, 2.0], device=tpu)
    torch_tpu.reset_metrics()
    first = fallback_example(x, y)
    second = fallback_example(x, y)
    assert first.device.type == "tpu"
    torch.testing.assert_close(second.cpu(), fallback_example(x.cpu(), y.cpu()))
    assert torch_tpu.metrics()["fallback_ops"] == {"tpu_test::fallback_example": 2}
    # torch.ops calls run without PyTorch's Python warning handler: the warning goes to stderr.
    assert capfd.readouterr().err.count("tpu: tpu_test::fallback_example is not lowered") == 1


def test_fallback_can_be_forbidden():
    result = run_python(
        "import torch, torch_tpu\n"
        "from cpu_only_ops import define_cpu_only_op\n"
        "op = define_cpu_only_op('forbidden_example')\n"
        "x = torch.ones(3, device='tpu')\n"
        "try:\n    op(x, x)\n"
        "except NotImplementedError as e:\n    print('ERROR', e)\n",
        TORCH_TPU_FALLBACK="error",
        PYTHONPATH=str(Path(__file__).parent),
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR tpu: tpu_test::forbidden_example has no tpu lowering" in result.stdout
