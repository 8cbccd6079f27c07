"""The counted, warned CPU fallback for ops without a lowering."""

import pytest
import torch

import torch_tpu
from conftest import run_python


def test_unlowered_op_falls_back_with_one_warning_and_a_count(tpu):
    x = torch.tensor([1.0, 4.0, 9.0], device=tpu)
    torch_tpu.reset_metrics()
    with pytest.warns(UserWarning, match="aten::special_bessel_j0"):
        first = torch.special.bessel_j0(x)
    second = torch.special.bessel_j0(x)
    assert first.device.type == "tpu"
    torch.testing.assert_close(second.cpu(), torch.special.bessel_j0(x.cpu()))
    assert torch_tpu.metrics()["fallback_ops"] == {"aten::special_bessel_j0.out": 2}


def test_fallback_can_be_forbidden():
    result = run_python(
        "import torch\n"
        "x = torch.ones(3, device='tpu')\n"
        "try:\n    torch.special.bessel_j0(x)\n"
        "except NotImplementedError as e:\n    print('ERROR', e)\n",
        TORCH_TPU_FALLBACK="error",
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR tpu: aten::special_bessel_j0.out has no tpu lowering" in result.stdout
