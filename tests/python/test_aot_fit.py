"""Will a training step fit on a TPU? torch_tpu.aot's step accounting against the TPU compiler's
own figures (libtpu, deviceless), and against PyTorch CPU's tensors for what a step keeps."""

import gc

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import torch_tpu
import torch_tpu.aot as aot

_GiB = 1 << 30


def _slice_module(argument_bytes: int) -> str:
    """A program whose memory is its one f32 argument of ``argument_bytes`` (it returns one
    element of it)."""
    n = argument_bytes // 4
    return f"""module @fit_probe {{
  func.func public @main(%arg0: tensor<{n}xf32>) -> (tensor<1xf32>) {{
    %0 = "stablehlo.slice"(%arg0) {{start_indices = array<i64: 0>,
        limit_indices = array<i64: 1>, strides = array<i64: 1>}}
        : (tensor<{n}xf32>) -> tensor<1xf32>
    "func.return"(%0) : (tensor<1xf32>) -> ()
  }}
}}"""


def test_capacity_is_where_the_tpu_compiler_starts_rejecting_programs():
    capacity = aot.hbm_capacity("v5e")
    assert capacity <= aot.SPEC_HBM_BYTES["v5e"]
    # The compiler prints its figure with two decimals of GiB (within 5 MiB).
    accepted = aot.compile_module("v5e", _slice_module(capacity - (64 << 20)))
    assert accepted.memory["argument_bytes"] == capacity - (64 << 20)
    with pytest.raises(torch_tpu._C.PjrtError, match="RESOURCE_EXHAUSTED"):
        aot.compile_module("v5e", _slice_module(capacity + (64 << 20)))
    assert aot.hbm_capacity("v6e") > capacity


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))


_X, _Y = torch.randn(16, 32), torch.randn(16, 8)


# The step's accounting counts every tpu tensor live in the process, and this worker's earlier
# tests may have left some: what was live when the step was traced (no garbage is freed while it
# is).
_held_before = 0


@pytest.fixture(scope="module")
def small_step():
    model = _mlp()
    global _held_before
    gc.collect()
    gc.disable()
    try:
        _held_before = aot._live_tensor_bytes()
        traced = aot.trace_training_step(model, (_X,), torch.optim.AdamW, loss_fn=F.mse_loss,
                                         targets=(_Y,))
    finally:
        gc.enable()
    return model, traced, traced.compile("v5e")


def test_step_keeps_what_a_cpu_step_keeps(small_step):
    model, traced, result = small_step
    cpu_model = _mlp()
    optimizer = torch.optim.AdamW(cpu_model.parameters())
    F.mse_loss(cpu_model(_X), _Y).backward()
    gradients = sum(p.grad.nbytes for p in cpu_model.parameters())
    optimizer.step()
    # AdamW's step counts stay on the host (0-d CPU tensors) for tpu parameters too.
    state = sum(value.nbytes for per_parameter in optimizer.state.values()
                for name, value in per_parameter.items() if name != "step")
    assert result.resident["parameters"] == sum(p.nbytes for p in model.parameters())
    assert result.resident["gradients"] == gradients
    assert result.resident["optimizer_state"] == state
    assert result.resident["inputs"] == _X.nbytes + _Y.nbytes
    assert {p.phase for p in result.programs} == {"forward", "backward", "optimizer"}
    assert not result.placeholders and traced.placeholders is False


def test_step_peak_is_at_least_each_program_and_the_resident_tensors(small_step):
    _, traced, result = small_step
    step = result.step_hbm_bytes
    for program in result.programs:
        m = program.memory
        assert step >= m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"]
        assert step >= m["peak_bytes"]
    resident = result.resident
    assert step >= resident["parameters"] + resident["gradients"] + resident["optimizer_state"]
    assert traced.lower_bound_bytes <= step
    assert result.fits
    assert result.summary() == (f"v5e: step needs {step / _GiB:.2f} GiB of "
                                f"{result.capacity_bytes / _GiB:.2f} GiB HBM (fits)")


def test_step_formula_uses_the_compilers_figures(small_step):
    _, _, result = small_step
    code = {p.fingerprint: p.memory["generated_code_bytes"] for p in result.programs}
    assert result.code_bytes == sum(code.values())
    per_program = []
    for program in result.programs:
        m = program.memory
        live = max(m["peak_bytes"],
                   m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"])
        expected = live + result.tensors_around(program) + sum(code.values())
        assert result.program_step_bytes(program) == expected
        per_program.append(expected)
    assert result.step_hbm_bytes == max(per_program)
    # Around the optimizer's one program: what the step keeps that it does not take (the
    # inputs); it takes the parameters, gradients and state.
    optimizer_program, = [p for p in result.programs if p.phase == "optimizer"]
    assert result.tensors_around(optimizer_program) == result.resident["inputs"] + _held_before


def test_placeholders_trace_the_same_programs_and_tensors(small_step):
    model, traced, _ = small_step
    without_values = aot.trace_training_step(model, (_X,), torch.optim.AdamW,
                                             loss_fn=F.mse_loss, targets=(_Y,),
                                             placeholders=True)
    assert without_values.placeholders
    assert [text for _, _, text in without_values.programs] == \
        [text for _, _, text in traced.programs]
    assert without_values.phase_tensors == traced.phase_tensors
    assert without_values.resident == traced.resident
    torch.tpu.synchronize()  # the process goes on working: nothing failed is left pending
    assert (torch.ones(2, device="tpu") * 3).cpu().tolist() == [3.0, 3.0]


class _ReadsTables(nn.Module):
    """Frozen 1 GiB tables the step only reads (a few elements of each), and a trainable weight
    (all of it: a gradient mostly of zeros would be a constant the TPU compiler folds, slowly).
    Several tables rather than one: the local device refuses any one tensor larger than the
    host's free memory, placeholders included (they are allocated as storages)."""

    def __init__(self, tables: int, weight_bytes: int):
        super().__init__()
        self.tables = nn.ParameterList(nn.Parameter(torch.empty(_GiB // 4), requires_grad=False)
                                       for _ in range(tables))
        self.weight = nn.Parameter(torch.empty(weight_bytes // 4))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return sum(table[rows].sum() for table in self.tables) * self.weight.sum()


def test_step_that_outgrows_v5e_by_its_resident_tensors_does_not_fit():
    # 12 GiB read, 1 GiB trained (+1 GiB of gradients, +2 GiB of AdamW state): every program
    # fits a v5e on its own, the step does not; traced without values (nothing is allocated).
    with torch.device("meta"):
        model = _ReadsTables(12, _GiB)
    results = aot.compile_training_step(["v5e", "v6e"], model, (torch.arange(4),))
    v5e, v6e = results["v5e"], results["v6e"]
    assert v5e.placeholders
    assert not any(p.out_of_memory for p in v5e.programs)
    assert all(p.live_bytes <= v5e.capacity_bytes for p in v5e.programs)
    resident = v5e.resident
    assert resident["parameters"] == 13 * _GiB
    assert resident["optimizer_state"] == 2 * _GiB
    assert v5e.step_hbm_bytes >= 16 * _GiB > v5e.capacity_bytes
    assert not v5e.fits
    assert v5e.summary().endswith("HBM (does not fit)")
    assert v6e.fits and v6e.step_hbm_bytes <= v6e.capacity_bytes


def test_program_larger_than_hbm_is_recorded_rather_than_raised():
    with torch.device("meta"):
        model = _ReadsTables(20, 1 << 20)
    result = aot.compile_training_step("v5e", model, (torch.arange(4),))
    rejected = [p for p in result.programs if p.out_of_memory]
    assert rejected and all("RESOURCE_EXHAUSTED" in p.out_of_memory for p in rejected)
    assert all(p.memory["peak_bytes"] >= 20 * _GiB for p in rejected)
    assert not result.fits
    assert "does not fit; the TPU compiler rejected" in result.summary()


def test_a_model_on_the_meta_device_needs_placeholders():
    with torch.device("meta"):
        model = _mlp()
    with pytest.raises(ValueError) as raised:
        aot.trace_training_step(model, (_X,), loss_fn=F.mse_loss, targets=(_Y,),
                                placeholders=False)
    assert str(raised.value) == ("trace_training_step: a model on the meta device has no values "
                                 "to trace; use placeholders=True")
