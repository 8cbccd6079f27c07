"""AOTAutograd's cache with the "tpu" backend: a warm process loads the forward and backward graphs
AOTAutograd traced in an earlier one instead of tracing them (torch_tpu/_dynamo/output_code.py)."""

from __future__ import annotations

import json
import os

from conftest import run_python

# A training step of a small model under torch.compile, three steps, in a fresh process. It prints
# AOTAutograd's cache counters, whether Inductor's lowerings were imported, and the losses and
# parameters after the steps, with CPU's beside them.
STEP = r"""
import json, sys
import torch
import torch_tpu
from torch._dynamo.utils import counters


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 1))


def train(model, x, compiled):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step():
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    run = torch.compile(step, backend="tpu") if compiled else step
    return [float(run()) for _ in range(3)]


x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
cpu = build()
cpu_losses = train(cpu, x, compiled=False)
model = build().to("tpu")
losses = train(model, x.to("tpu"), compiled=True)
error = max(float((p.cpu() - q).abs().max()) for p, q in zip(model.parameters(), cpu.parameters()))
print(json.dumps({"losses": losses, "cpu_losses": cpu_losses, "parameter_error": error,
                  "counters": dict(counters["aot_autograd"]),
                  "inductor_lowerings": "torch._inductor.lowering" in sys.modules}))
"""


def _run(cache_dir, **env) -> dict:
    completed = run_python(STEP, TORCHINDUCTOR_CACHE_DIR=str(cache_dir), **env)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return {**json.loads(completed.stdout.strip().splitlines()[-1]), "stderr": completed.stderr}


def _check_matches_cpu(result: dict) -> None:
    for loss, expected in zip(result["losses"], result["cpu_losses"], strict=True):
        assert abs(loss - expected) <= 1e-5 * max(1.0, abs(expected)), result
    assert result["parameter_error"] <= 1e-5, result


def test_a_warm_process_loads_the_traced_graphs_instead_of_tracing(tmp_path):
    cold = _run(tmp_path)
    assert cold["counters"].get("autograd_cache_miss") == 1, cold["counters"]
    assert cold["counters"].get("autograd_cache_saved") == 1, cold["counters"]
    assert "autograd_cache_hit" not in cold["counters"], cold["counters"]
    _check_matches_cpu(cold)
    entries = os.listdir(tmp_path / "aotautograd")
    assert len(entries) == 1, entries

    warm = _run(tmp_path)
    assert warm["counters"].get("autograd_cache_hit") == 1, warm["counters"]
    assert "autograd_cache_miss" not in warm["counters"], warm["counters"]
    assert "autograd_cache_saved" not in warm["counters"], warm["counters"]
    _check_matches_cpu(warm)
    assert warm["losses"] == cold["losses"]
    # The key leaves Inductor's part out: computing it would import Inductor's backends.
    assert not warm["inductor_lowerings"] and not cold["inductor_lowerings"]

    # The backend adds its own key (its Python, its decompositions, the native build) to the
    # user's tag (torch.compiler.config.cache_key_tag) rather than replacing it.
    tagged = _run(tmp_path, TORCH_COMPILE_CACHE_KEY_TAG="another build")
    assert tagged["counters"].get("autograd_cache_miss") == 1, tagged["counters"]
    _check_matches_cpu(tagged)
    assert len(os.listdir(tmp_path / "aotautograd")) == 2


def test_disabled_caches_keep_no_entry(tmp_path):
    result = _run(tmp_path, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    _check_matches_cpu(result)
    assert not any(key.startswith("autograd_cache_") for key in result["counters"]), result
    assert not (tmp_path / "aotautograd").exists()


def test_a_directory_others_can_write_is_not_used(tmp_path):
    # Entries are pickles: one planted by another user would run in this process.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = _run(shared)
    _check_matches_cpu(result)
    assert not any(key.startswith("autograd_cache_") for key in result["counters"]), result
    assert not (shared / "aotautograd").exists()
    assert (f'torch.compile(backend="tpu"): AOTAutograd\'s cache is not used: '
            f"{shared / 'aotautograd'} (or {shared}) is not a directory of this user that only "
            "it can write, and loading an entry runs code; TORCHINDUCTOR_CACHE_DIR names another"
            ) in result["stderr"]


# torch.compile's precompile API: the compiled function, Dynamo's bytecode and guards included,
# saved by one process and loaded by another, which then traces nothing at all.
PRECOMPILED = r"""
import json, os
import torch
import torch_tpu
from torch._dynamo.utils import counters

mode, path = os.environ["PRECOMPILE_MODE"], os.environ["PRECOMPILE_PATH"]


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 1))


def loss_of(model, x):
    return model(x).pow(2).mean()


x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
cpu = build()
expected = loss_of(cpu, x)
expected.backward()
model = build().to("tpu")
if mode == "save":
    compiled = torch.compile(loss_of, fullgraph=True, backend="tpu").aot_compile(
        ((model, x.to("tpu")), {}))
    compiled.save_compiled_function(path)
else:
    with open(path, "rb") as file:
        compiled = torch.compiler.load_compiled_function(file)
loss = compiled(model, x.to("tpu"))
loss.backward()
error = max(float((p.grad.cpu() - q.grad).abs().max())
            for p, q in zip(model.parameters(), cpu.parameters()))
print(json.dumps({"loss": float(loss), "expected": float(expected), "grad_error": error,
                  "frames_traced": counters["stats"].get("unique_graphs", 0),
                  "programs_compiled": torch_tpu.metrics()["compile_count"]}))
"""


def test_a_function_compiled_ahead_of_time_loads_in_a_new_process_and_traces_nothing(tmp_path):
    path = str(tmp_path / "loss_of.pt2")
    results = []
    for mode in ("save", "load"):
        completed = run_python(PRECOMPILED, PRECOMPILE_MODE=mode, PRECOMPILE_PATH=path,
                               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "torch_cache"))
        assert completed.returncode == 0, completed.stderr[-3000:]
        results.append(json.loads(completed.stdout.strip().splitlines()[-1]))
    saved, loaded = results
    for result in results:
        assert abs(result["loss"] - result["expected"]) <= 1e-6, result
        assert result["grad_error"] <= 1e-6, result
    assert saved["frames_traced"] == 1, saved
    # The loading process traces no frame, and its programs come from the cache tiers.
    assert loaded["frames_traced"] == 0 and loaded["programs_compiled"] == 0, loaded


# A graph whose constants live on the device (a model that builds a tensor on its input's device
# in forward, as HF models build their masks' fill values): the entry holds them as host tensors
# and the loading process puts them back on the device.
CONSTANTS = r"""
import json
import torch
import torch_tpu
from torch._dynamo.utils import counters


def masked(x):
    fill = torch.tensor([-5.0, 7.0, 0.5, 2.0], device=x.device)
    return torch.where(x > 0, x, fill) * torch.tensor(3.0, device=x.device)


x = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
with torch.no_grad():
    result = torch.compile(masked, backend="tpu")(x.to("tpu")).cpu()
print(json.dumps({"error": float((result - masked(x)).abs().max()),
                  "counters": dict(counters["aot_autograd"])}))
"""


def test_graph_constants_on_the_device_are_kept_and_restored(tmp_path):
    runs = []
    for _ in range(2):
        completed = run_python(CONSTANTS, TORCHINDUCTOR_CACHE_DIR=str(tmp_path))
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert "unable to serialize" not in completed.stderr, completed.stderr[-3000:]
        runs.append(json.loads(completed.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["counters"].get("autograd_cache_saved") == 1, cold
    assert warm["counters"].get("autograd_cache_hit") == 1, warm
    assert cold["error"] == 0 and warm["error"] == 0, runs
