"""Deviceless ahead-of-time compilation for TPU targets (torch_tpu.aot) with the real libtpu.

libtpu is a test dependency (pyproject.toml, x86-64 Linux): it compiles for a named TPU topology
on this host, which has no TPU. The programs compiled are the ones the local device runs.
"""

import json
import sys
from pathlib import Path

import pytest
import torch

import torch_tpu
import torch_tpu.aot as aot

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import mingpt  # noqa: E402

# Captures what strict mode runs, op by op.
pytestmark = pytest.mark.strict_mode


def test_topologies_name_their_tpu_generation():
    assert aot.topology("v5e").device_kinds == ["TPU v5 lite"]
    assert aot.topology("v6e").device_kinds == ["TPU v6 lite"]
    assert aot.topology("v5e:2x2").device_kinds == ["TPU v5 lite"] * 4
    assert aot.topology("v5e").platform_name == "tpu"


def test_unknown_topology_is_the_plugins_error():
    with pytest.raises(torch_tpu._C.PjrtError, match="v5litepod-4"):
        aot.topology("v5litepod-4")


def test_capture_sees_programs_built_before_it_began():
    x = torch.arange(6.0, device="tpu")
    (x * 2).cpu()  # builds and caches the program
    with aot.capture_modules() as captured:
        (x * 2).cpu()
    assert [d.split("(")[0] for d, _ in captured] == ["aten::mul.Tensor"]
    assert "stablehlo.multiply" in captured[0][1]


def test_compile_for_forward_and_backward_on_two_targets():
    def f(x, w):
        return torch.relu(x @ w).sum(0)

    x, w = torch.randn(8, 16), torch.randn(16, 4, requires_grad=True)
    results = aot.compile_for(["v5e", "v6e"], f, (x, w))
    assert w.device.type == "cpu" and w.grad is None  # the caller's tensors are untouched
    for target, result in results.items():
        assert [p.phase for p in result.programs] == ["forward", "backward"], target
        for program in result.programs:
            assert program.serialized
            assert program.memory["argument_bytes"] >= 8 * 16 * 4
            assert program.cost["flops"] > 0
        assert result.hbm_bytes >= max(p.memory["argument_bytes"] for p in result.programs)


def test_compile_for_a_module_saves_its_executables(tmp_path):
    model = mingpt.build(0, block=8, layers=1, heads=2, dim=16)
    x, y = mingpt.make_batches(1, 2, 8, 0)[0]

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x, y):
            return self.model(x, y)[1]

    result = aot.compile_for("v5e", Loss(), (x, y))
    assert next(model.parameters()).device.type == "cpu"
    assert {p.phase for p in result.programs} == {"forward", "backward"}
    index = json.loads((result.save(tmp_path) / "programs.json").read_text())
    assert index["device_kind"] == "TPU v5 lite"
    for entry in index["programs"]:
        assert (tmp_path / entry["file"]).stat().st_size > 0


def test_rejected_module_raises_the_compilers_diagnostic():
    with pytest.raises(torch_tpu._C.PjrtError):
        aot.compile_module("v5e", "module { func.func @main() { not_an_op } }")
