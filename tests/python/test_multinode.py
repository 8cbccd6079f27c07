"""Multi-node torchrun on tpu_dist: two torchrun launches of 2 processes each form one 4-rank job.

The two launches stand for two nodes on this one machine: distinct node ranks, one rendezvous
endpoint (c10d rendezvous, or the static --master-addr/--master-port one). The worker
(dist_workers/multinode.py) compares against PyTorch itself: single-process CPU training of the
same global batch for DDP and FSDP2. Every launch runs under a timeout in its own session, so a
hang fails the test and leaves no process behind.
"""

import os
import re
import signal
import socket
import subprocess
import sys

import pytest
import torch

WORKER = os.path.join(os.path.dirname(__file__), "dist_workers", "multinode.py")
LAUNCH_TIMEOUT_S = 90

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="torch.distributed is not available")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def two_nodes(*args, rendezvous="c10d", env=None):
    """Both launches of the worker; returns each node's (exit code, output), node 0 first. A
    launch that outlives LAUNCH_TIMEOUT_S (a hang) is killed with its workers and fails the test."""
    port = free_port()
    if rendezvous == "c10d":
        # Node ranks come from the order the launches join; the workers report theirs.
        where = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
    else:
        where = ["--master-addr=127.0.0.1", f"--master-port={port}"]
    launches = []
    for node in (0, 1):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                   "--nproc-per-node=2", f"--node-rank={node}", *where, WORKER, *map(str, args)]
        launches.append(subprocess.Popen(command, env={**os.environ, **(env or {})},
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True, start_new_session=True))
    results = []
    timed_out = False
    for launch in launches:
        try:
            output, _ = launch.communicate(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for each in launches:
                try:
                    os.killpg(each.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            output, _ = launch.communicate()
            timed_out = True
        results.append((launch.returncode, output))
    assert not timed_out, (f"a launch ran past {LAUNCH_TIMEOUT_S} s:\n"
                           + "\n".join(out for _, out in results))
    return results


def check_devices(output):
    """Each rank drives tpu:LOCAL_RANK of its process's LOCAL_WORLD_SIZE devices, not tpu:RANK."""
    found = re.findall(r"rank (\d): node (\d), local rank (\d), drives tpu:(\d) of (\d)", output)
    assert sorted(int(rank) for rank, *_ in found) == [0, 1, 2, 3], output
    for rank, node, local_rank, index, count in found:
        assert int(rank) == 2 * int(node) + int(local_rank), output
        assert (index, count) == (local_rank, "2"), output


@pytest.mark.parametrize("mode,rendezvous", [("ddp", "c10d"), ("fsdp2", "static")])
def test_two_nodes_train_like_one_process(mode, rendezvous):
    # fsdp2: sharded over the 4 ranks, then HSDP (replicated across the nodes, sharded within).
    # GLOO_SOCKET_IFNAME picks the interface peers reach each rank at, for Gloo and tpu_dist alike.
    env = {"GLOO_SOCKET_IFNAME": "lo"} if mode == "ddp" else None
    results = two_nodes(mode, rendezvous=rendezvous, env=env)
    output = "\n".join(out for _, out in results)
    assert [code for code, _ in results] == [0, 0], output
    check_devices(output)
    for rank in range(4):
        for name in {"ddp": ["ddp"], "fsdp2": ["fsdp2", "hsdp"]}[mode]:
            assert re.search(rf"rank {rank}: {name}: losses \[[-\d., ]+\] and final parameters "
                             "match single-process training", output), output
        assert f"rank {rank}: fallback ops: {{}}" in output, output


# Node 1 SIGKILLed after a barrier (its connections close), or node 0, whose agent holds the
# store, hung (alive, its connections open, as a frozen or unreachable host).
@pytest.mark.parametrize("mode,lost", [("kill", 1), ("hang", 0)])
def test_a_lost_node_fails_the_others_collective_naming_its_ranks(mode, lost):
    results = two_nodes(mode, lost, rendezvous="static")
    output = "\n".join(out for _, out in results)
    check_devices(output)
    survivor = 1 - lost
    assert results[survivor][0] != 0, output
    if mode == "kill":
        assert "Signal 9 (SIGKILL) received" in results[lost][1], output
    missing = f"ranks {2 * lost}, {2 * lost + 1} did not reach it"
    for rank in (2 * survivor, 2 * survivor + 1):
        line = re.search(rf"rank {rank}: (\w+) after ([\d.]+) s: (.*)", output)
        assert line, output
        assert line.group(1) == "DistBackendError"
        if mode == "kill":
            assert float(line.group(2)) < 20.0  # the group's timeout; in fact at once
            assert line.group(3) == f"tpu_dist allreduce #3 on rank {rank} failed: {missing}"
        else:
            assert 4.5 <= float(line.group(2)) < 15.0
            assert line.group(3) == (f"tpu_dist allreduce #3 on rank {rank} timed out after "
                                     f"5000 ms: {missing}")
