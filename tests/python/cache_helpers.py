"""Shared by the compilation-cache tests: a small program run in child processes, and readers
for what the children report and store."""

import json
import struct
import subprocess

# A child's preamble: work() runs three small programs and checks them against CPU results;
# report() prints the metrics as one JSON line.
PROGRAM = r'''
import glob, json, os, socket, sys, time
import torch, torch_tpu

def work(columns=6, device="tpu"):
    # Each width is a different set of programs (the launch path keeps a program once built, so a
    # process asks the cache again only for new ones).
    x = torch.arange(4 * columns, dtype=torch.float32).reshape(4, columns)
    t = x.to(device)
    checks = [
        ((t * 3 - 1).sum(1), (x * 3 - 1).sum(1)),
        (torch.matmul(t, t.T), torch.matmul(x, x.T)),
        (t.exp().amax(0), x.exp().amax(0)),
    ]
    for got, want in checks:
        torch.testing.assert_close(got.cpu(), want)

def report(**extra):
    metrics = torch_tpu.metrics()
    metrics.pop("fallback_ops")
    print("RESULT " + json.dumps({**metrics, **extra}), flush=True)
'''

HEADER = struct.Struct("<8sIIQQQ")
MAGIC = b"TPUXCACH"


def results(completed: subprocess.CompletedProcess) -> list[dict]:
    """The child's report() lines, after checking it exited cleanly."""
    assert completed.returncode == 0, completed.stderr[-3000:]
    return [json.loads(line[len("RESULT "):]) for line in completed.stdout.splitlines()
            if line.startswith("RESULT ")]


def entry_key(data: bytes) -> str:
    """The full key an entry was stored under (runtime identity and module text)."""
    key_length = HEADER.unpack_from(data)[3]
    return data[HEADER.size:HEADER.size + key_length].decode()


SIGNED_FLAG = 1
TAG_SIZE = 32  # HMAC-SHA256 after the payload of a signed entry


def entry_is_whole(data: bytes) -> bool:
    """Whether `data` holds a header and exactly the key, payload and tag bytes it announces."""
    if len(data) < HEADER.size:
        return False
    magic, _, flags, key_length, payload_length, _ = HEADER.unpack_from(data)
    tag = TAG_SIZE if flags & SIGNED_FLAG else 0
    return magic == MAGIC and len(data) == HEADER.size + key_length + payload_length + tag


def entry_is_signed(data: bytes) -> bool:
    return bool(HEADER.unpack_from(data)[2] & SIGNED_FLAG)
