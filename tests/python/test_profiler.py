"""torch.profiler with ProfilerActivity.PrivateUse1: device work on its own tracks.

A small training step (Linear + MSE loss + backward + SGD) runs under the profiler; the exported
Chrome trace must hold the step's program executions, its compiles with their cache tier and its
host<->device transfers on the tpu's own process, each linked to the CPU op that launched it, and
key_averages() must show device time for the matmuls. tpu_dist collectives (a group of one
process) appear on the tpu's collectives row, linked to their c10d ops.
"""

import json
import os

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from conftest import run_python

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "privateuse1_runtime"}
TIERS = {"memory", "shared", "persistent", "compiled"}


def _step_model():
    # Sizes of this test's own, so its programs are new to the process's memory tier.
    torch.manual_seed(0)
    model = torch.nn.Linear(13, 7).to("tpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer


def _train_step(model, optimizer, inputs, target):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs.to("tpu")), target.to("tpu"))
    loss.backward()
    optimizer.step()
    return loss.item()


def _load_trace(prof, tmp_path):
    path = os.path.join(tmp_path, "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as file:
        return json.load(file)["traceEvents"]


def _device_events(events):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]


def _cpu_ops(events):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]


def _metric_counts():
    m = torch_tpu.metrics()
    return {"compiled": m["cache_misses"], "shared": m["cache_hits_shared"],
            "persistent": m["cache_hits_remote"], "memory": m["cache_hits_memory"]}


@pytest.fixture(scope="module")
def profiled_step(tmp_path_factory):
    """The step profiled once: its programs are new to the process, so it compiles (or loads
    them from the cache tiers) while recording."""
    tmp_path = tmp_path_factory.mktemp("profile")
    model, optimizer = _step_model()
    inputs, target = torch.randn(5, 13), torch.randn(5, 7)
    fallbacks = sum(torch_tpu.metrics()["fallback_ops"].values())
    torch.tpu.synchronize()
    before = _metric_counts()
    # Strict mode (also when the suite runs in defer-and-fuse mode): one program per op.
    with torch_tpu.eager_mode("strict"), \
            profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        assert torch_tpu._C._profiler_recording()
        loss = _train_step(model, optimizer, inputs, target)
    after = _metric_counts()
    assert not torch_tpu._C._profiler_recording()
    assert sum(torch_tpu.metrics()["fallback_ops"].values()) == fallbacks
    # The same step on CPU gives the same loss: the profiled step ran for real.
    cpu_model = torch.nn.Linear(13, 7)
    cpu_model.load_state_dict({k: v.cpu() for k, v in _step_model()[0].state_dict().items()})
    expected = torch.nn.functional.mse_loss(cpu_model(inputs), target).item()
    assert loss == pytest.approx(expected, rel=1e-5)
    return prof, _load_trace(prof, tmp_path), before, after


def test_device_events_on_their_own_track(profiled_step):
    _, events, _, _ = profiled_step
    cpu = _cpu_ops(events)
    device = _device_events(events)
    assert cpu and device
    cpu_tracks = {(e["pid"], e["tid"]) for e in cpu}
    assert not cpu_tracks & {(e["pid"], e["tid"]) for e in device}
    assert {e["pid"] for e in device}.isdisjoint({e["pid"] for e in cpu})
    # Perfetto names the tracks from these metadata events: "tpu:0", then "programs", ...
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for event in device:
        assert processes[event["pid"]] == f"tpu:{event['pid']}"
        assert processes[event["pid"]] == event["args"]["device"]
    rows = {"kernel": "programs", "gpu_memcpy": "transfers",
            "privateuse1_runtime": "compiles (cache tier)"}
    for event in device:
        assert threads[(event["pid"], event["tid"])] == rows[event["cat"]]


def test_programs_linked_to_their_launching_ops(profiled_step):
    _, events, _, _ = profiled_step
    # Launchers: ops, and for work issued outside any op (the optimizer step's fused graph,
    # run when the step ends) the user annotation around it.
    cpu_by_id = {e["args"]["External id"]: e for e in events
                 if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
                 and "External id" in e.get("args", {})}
    trace_end = max(e["ts"] + e["dur"] for e in events if e.get("ph") == "X")
    programs = [e for e in _device_events(events) if e["cat"] == "kernel"]
    names = {e["name"] for e in programs}
    # The step's programs carry their ops' names: forward matmul, backward matmul, the loss.
    assert {"aten::addmm", "aten::mm"} <= names, names
    assert any("mse_loss" in name for name in names), names
    for program in programs:
        assert program["dur"] >= 0
        assert program["args"]["device"].startswith("tpu:")
        launcher = cpu_by_id[program["args"]["External id"]]
        # Device work starts after the op that launched it began, and ends within the trace.
        assert program["ts"] >= launcher["ts"]
        assert program["ts"] + program["dur"] <= trace_end
        # Its name is the launching op's own (or that of an op the launching op called); strict
        # mode records an optimizer step as one fused graph, launched by the step's annotation.
        if launcher["cat"] == "user_annotation":
            assert launcher["name"].startswith("Optimizer.step#"), launcher["name"]
            assert program["name"].startswith("a fused graph of"), program["name"]
        else:
            assert program["name"] == launcher["name"] or program["name"].startswith("aten::")


def test_compiles_show_their_cache_tier(profiled_step):
    _, events, before, after = profiled_step
    compiles = [e for e in _device_events(events) if e["cat"] == "privateuse1_runtime"]
    assert compiles
    tiers = [e["args"]["cache tier"] for e in compiles]
    assert set(tiers) <= TIERS
    # Every request for an executable while recording is one event, its tier as counted (the
    # memory tier's count also has the launches whose plan was cached, which ask for nothing).
    for tier in ("compiled", "shared", "persistent"):
        assert tiers.count(tier) == after[tier] - before[tier], tier
    assert tiers.count("memory") <= after["memory"] - before["memory"]
    for event in compiles:
        assert event["dur"] >= 0
        assert event["name"].startswith(("XLA compile", "load executable"))


def test_transfers_both_ways(profiled_step):
    _, events, _, _ = profiled_step
    transfers = [e for e in _device_events(events) if e["cat"] == "gpu_memcpy"]
    by_name = {e["name"]: e for e in transfers}
    assert {"host to device", "device to host"} <= set(by_name)
    # inputs + target (5x13 and 5x7 float32) go up, the loss (one float32) comes back.
    assert by_name["device to host"]["args"]["bytes"] == 4
    assert {e["args"]["bytes"] for e in transfers if e["name"] == "host to device"} >= {5 * 13 * 4}
    for event in transfers:
        assert event["dur"] >= 0


def test_key_averages_device_time(profiled_step):
    prof, _, _, _ = profiled_step
    averages = {row.key: row for row in prof.key_averages()}
    for op in ("aten::addmm", "aten::mm"):
        assert averages[op].device_time_total > 0, op
        assert averages[op].self_device_time_total > 0, op
    # The table PyTorch prints has the device columns.
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=10)
    assert "Self TPU" in table, table


def test_compiled_graph_program(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(9, 5), torch.nn.ReLU()).to("tpu")
    compiled = torch.compile(model, backend="tpu")
    inputs = torch.randn(3, 9)
    compiled(inputs.to("tpu")).sum().item()  # compiles outside the profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        result = compiled(inputs.to("tpu")).cpu()
    torch.testing.assert_close(result, model.cpu()(inputs), rtol=1e-5, atol=1e-5)
    programs = [e for e in _device_events(_load_trace(prof, tmp_path)) if e["cat"] == "kernel"]
    graphs = [e for e in programs if e["name"].startswith("compiled graph")]
    assert graphs, [e["name"] for e in programs]
    assert all(e["dur"] >= 0 for e in graphs)
    assert all(e["args"]["program"].startswith(e["name"] + "(") for e in graphs)


def test_cpu_only_profile_records_no_device_work(tmp_path):
    model, optimizer = _step_model()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert not torch_tpu._C._profiler_recording()
        _train_step(model, optimizer, torch.randn(5, 13), torch.randn(5, 7))
    assert not _device_events(_load_trace(prof, tmp_path))


def test_fused_graph_program(tmp_path):
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    with torch_tpu.eager_mode("defer_and_fuse"), \
            profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        result = ((a.to("tpu") + b.to("tpu")) * 3).cpu()
    torch.testing.assert_close(result, (a + b) * 3)
    programs = [e for e in _device_events(_load_trace(prof, tmp_path)) if e["cat"] == "kernel"]
    fused = [e for e in programs if e["name"].startswith("a fused graph of")]
    assert fused, [e["name"] for e in programs]
    assert any("aten::add.Tensor" in e["args"]["program"] for e in fused)


COLLECTIVES_CODE = """
import os
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile
import torch_tpu

dist.init_process_group("tpu_dist", store=dist.HashStore(), rank=0, world_size=1)
summed, sent = torch.arange(6.0), torch.ones(3)
on_tpu = summed.to("tpu"), sent.to("tpu")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    dist.all_reduce(on_tpu[0])
    dist.broadcast(on_tpu[1], 0)
    torch.tpu.synchronize()
prof.export_chrome_trace(os.environ["TRACE_PATH"])
# One rank: the reduction and the broadcast give back what the rank holds, as Gloo's would.
assert torch.equal(on_tpu[0].cpu(), summed) and torch.equal(on_tpu[1].cpu(), sent)
dist.destroy_process_group()
print("ok")
"""


def test_tpu_dist_collectives_on_their_own_track(tmp_path):
    # A process of its own: the default process group is process-wide state.
    path = os.path.join(tmp_path, "trace.json")
    result = run_python(COLLECTIVES_CODE, TRACE_PATH=path)
    assert result.stdout.strip().endswith("ok"), result.stderr[-2000:]
    with open(path) as file:
        events = json.load(file)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    collectives = [e for e in _device_events(events)
                   if threads.get((e["pid"], e["tid"])) == "collectives"]
    assert sorted(e["name"] for e in collectives) == ["allreduce", "broadcast"], \
        [(e["name"], threads.get((e["pid"], e["tid"]))) for e in _device_events(events)]
    launchers = {e["args"]["External id"]: e["name"] for e in _cpu_ops(events)
                 if "External id" in e.get("args", {})}
    for event in collectives:
        # Device time of the c10d op that issued it, on the tpu's process, with its tensors.
        assert event["cat"] == "kernel"
        assert processes[event["pid"]] == event["args"]["device"] == "tpu:0"
        assert event["dur"] > 0
        assert launchers[event["args"]["External id"]] == f"c10d::{event['name']}_"
        assert event["args"]["program"].startswith(
            "Float[6]" if event["name"] == "allreduce" else "Float[3]")
