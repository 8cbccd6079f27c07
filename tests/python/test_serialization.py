"""torch.save/torch.load of tpu tensors, views and state dicts."""

import io

import torch

from conftest import assert_same


def test_save_and_load_tpu_tensors_and_views():
    x = torch.arange(12.0).reshape(3, 4).to("tpu")
    buffer = io.BytesIO()
    torch.save({"x": x, "row": x[1], "t": x.t()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["x"].device.type == "tpu"
    assert_same(loaded["x"], x.cpu())
    assert_same(loaded["row"], x.cpu()[1])
    assert loaded["row"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert on_cpu["t"].device.type == "cpu"
    torch.testing.assert_close(on_cpu["t"], x.cpu().t())


def test_state_dict_round_trip_both_ways():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    cpu_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("tpu")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location="cpu")
    for key, value in cpu_state.items():
        assert torch.equal(state[key], value)
    buffer = io.BytesIO()
    torch.save(cpu_state, buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location="tpu")
    fresh = torch.nn.Linear(4, 3).to("tpu")
    fresh.load_state_dict(state)
    assert fresh.weight.device.type == "tpu"
    assert torch.equal(fresh.weight.detach().cpu(), cpu_state["weight"])
