"""tpu_dist, the torch.distributed backend of the tpu device, with 2 ranks on the CPU plugin.

Each test starts its ranks as separate processes (torchrun, or plain processes where a rank must
die without torchrun tearing the group down) running a worker script from dist_workers/, and
checks the workers' exit codes and reports. The workers compare against PyTorch itself: Gloo on
CPU tensors for the collectives, single-process CPU training for DDP and FSDP2.
"""

import os
import re
import socket
import subprocess
import sys

import pytest
import torch

WORKERS = os.path.join(os.path.dirname(__file__), "dist_workers")

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="torch.distributed is not available")


def torchrun(script, *args, nproc=2, timeout=600):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={nproc}", os.path.join(WORKERS, script), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ranks(script, *args, world=2, timeout=120):
    """The ranks as plain processes; returns each one's (exit code, output)."""
    port = free_port()
    processes = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank),
               "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        processes.append(subprocess.Popen(
            [sys.executable, os.path.join(WORKERS, script), *map(str, args)], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        results.append((process.returncode, output))
    return results


def test_backend_is_registered_for_tpu():
    import torch.distributed as dist

    import torch_tpu  # noqa: F401

    assert "tpu_dist" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"
    assert dist.Backend.backend_capability["tpu_dist"] == ["cpu", "tpu"]


def test_every_collective_matches_gloo():
    result = torchrun("collectives.py")
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (0, 1):
        match = re.search(rf"rank {rank}: (\d+) collective checks match gloo, (\d+) on the device",
                          result.stdout)
        assert match and int(match.group(1)) > 500, result.stdout
        # Two processes of the CPU plugin are two clients: the host transport carries them.
        assert int(match.group(2)) == 0, result.stdout


def test_every_collective_matches_gloo_on_the_device_transport():
    # A group of one process is a client of one process: allreduce, broadcast, all-gather,
    # reduce-scatter and all-to-all run as device programs (the transport TPU and GPU plugins use
    # across processes), the others on the host transport, and all match Gloo.
    result = torchrun("collectives.py", nproc=1)
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.search(r"rank 0: (\d+) collective checks match gloo, (\d+) on the device",
                      result.stdout)
    assert match and int(match.group(1)) > 400, result.stdout
    assert int(match.group(2)) > 150, result.stdout


def test_ddp_tp_simplefsdp_fsdp2_train_like_one_process_and_dcp_resumes_and_reshards(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    result = torchrun("training.py", "ddp", "tp", "simplefsdp", "fsdp2", "dcp", checkpoint)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "ddp: losses" in output and "match single-process training" in output, output
    assert "tensor+sequence parallel (DTensor, attention and MLP): losses" in output, output
    assert "simple_fsdp (torch.compile): losses" in output, output
    # Its compiled graphs run as native programs cut at the collectives, not eagerly.
    assert "runs eagerly" not in output, output
    assert "fsdp2: losses" in output, output
    assert "dcp: resumed losses" in output, output
    # FSDP2's copy ops run on the device, not through the CPU fallback.
    fallbacks = re.search(r"fallback ops: (\{.*\})", output).group(1)
    for op in ("split_with_sizes_copy", "_chunk_cat", "_foreach_copy"):
        assert op not in fallbacks, fallbacks
    # The 2-rank checkpoint loads into 1 rank (DCP reshards) and training continues alike.
    result = torchrun("training.py", "resume", checkpoint, nproc=1)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "dcp resharded to 1 rank(s): losses" in output, output


# Rank 0 holds torchrun's store: the diagnosis must not need it.
@pytest.mark.parametrize("dead", [1, 0], ids=["rank1", "rank0_holding_the_store"])
def test_a_dead_rank_fails_the_others_collective_naming_it(dead):
    results = start_ranks("failure.py", "kill" if dead == 1 else "kill0")
    survivor = 1 - dead
    code, out = results[survivor]
    assert results[dead][0] == -9
    assert code == 3, out
    line = re.search(rf"rank {survivor}: (\w+) after ([\d.]+) s: (.*)", out)
    assert line, out
    assert line.group(1) == "DistBackendError"
    assert float(line.group(2)) < 5.0
    assert line.group(3) == (f"tpu_dist allreduce #2 on rank {survivor} failed: rank {dead} did "
                             "not reach it")


def test_a_hung_rank_times_out_the_others_collective_naming_it():
    (code0, out0), _ = start_ranks("failure.py", "hang")
    assert code0 == 3, out0
    # wait(timeout) honours the caller's deadline; the work stays pending.
    assert ("rank 0: wait(timeout=1 s): DistBackendError: tpu_dist allreduce #2 on rank 0 timed "
            "out after 1000 ms: rank 1 did not reach it") in out0, out0
    line = re.search(r"rank 0: (\w+) after ([\d.]+) s: (.*)", out0)
    assert line, out0
    assert line.group(1) == "DistBackendError"
    assert 4.5 <= float(line.group(2)) < 10.0
    assert line.group(3) == ("tpu_dist allreduce #2 on rank 0 timed out after 5000 ms: "
                             "rank 1 did not reach it")


def test_mismatched_shapes_raise_on_every_rank_naming_them():
    results = start_ranks("failure.py", "mismatch")
    expected = {0: "tpu_dist allreduce #2 on rank 0 failed: rank 1 called allreduce with "
                   "Float[8] where rank 0 has Float[4]",
                1: "tpu_dist allreduce #2 on rank 1 failed: rank 0 called allreduce with "
                   "Float[4] where rank 1 has Float[8]"}
    for rank, (code, output) in enumerate(results):
        assert code == 3, output
        line = re.search(rf"rank {rank}: (\w+) after [\d.]+ s: (.*)", output)
        assert line and line.group(1) == "DistBackendError", output
        assert line.group(2) == expected[rank]
