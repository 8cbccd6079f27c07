"""A rank that dies, hangs or disagrees about shapes: the other rank's collective raises.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... failure.py kill|kill0|hang|mismatch

kill0 kills rank 0, which holds the store: the survivor's diagnosis must not need it.

Started by tests/python/test_distributed.py as plain processes (torchrun would tear the group
down itself as soon as one rank dies, before the survivor reports). The group's timeout is 5 s.
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import torch_tpu  # noqa: F401
from outcome import exit_with_outcome

mode = sys.argv[1]
rank = int(os.environ["RANK"])
torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
device = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=5))
x = torch.ones(4, device=device)
dist.all_reduce(x)
if (rank, mode) in ((1, "kill"), (0, "kill0")):
    os.kill(os.getpid(), signal.SIGKILL)
if rank == 1 and mode == "hang":
    time.sleep(20)
    sys.exit(0)
if mode == "mismatch" and rank == 1:
    x = torch.ones(8, device=device)
start = time.monotonic()
if mode == "hang" and rank == 0:
    # A deadline of the caller's own, shorter than the group's: wait() gives up at it.
    work = dist.all_reduce(x, async_op=True)
    try:
        work.wait(timeout=datetime.timedelta(seconds=1))
        print("rank 0: wait(timeout) returned", flush=True)
    except Exception as error:  # noqa: BLE001
        print(f"rank 0: wait(timeout=1 s): {type(error).__name__}: {str(error).splitlines()[0]}",
              flush=True)
    assert not work.is_completed()


def collective():
    if mode == "hang" and rank == 0:
        work.wait()  # the transport's deadline (the group's timeout) ends it
    else:
        dist.all_reduce(x)
    x.cpu()


exit_with_outcome(rank, start, collective)
