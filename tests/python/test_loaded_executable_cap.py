"""A process near the kernel's limit on memory mappings (vm.max_map_count) keeps working: loaded
programs are capped so their JIT code never needs a mapping the kernel refuses. Past the limit
XLA:CPU's JIT fails to map code and leaves a freed .eh_frame registered with the unwinder, and the
next C++ exception (any op's error) then crashes the process: this test crashed before the cap."""

import json
import os

from conftest import run_python

HEADROOM = 1500  # mappings left free: 200 programs' JIT code would need about twice as many


def test_programs_past_the_mapping_limit_are_unloaded_and_results_match_cpu(tmp_path):
    code = f"""
import ctypes, json, random, sys
import torch, torch_tpu
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

def mappings():
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)

with open("/proc/sys/vm/max_map_count") as text:
    limit = int(text.read())
device = torch.device("tpu")
(torch.ones(3, device=device) + 1).cpu()
# Fill the address space with mappings: every other page of one region made read-only splits it
# into one mapping per page.
pages = 2 * limit
region = libc.mmap(None, pages * 4096, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
page = 0
while mappings() < limit - {HEADROOM} and 2 * page < pages:
    for _ in range(max(1, (limit - {HEADROOM} - mappings()) // 2)):
        assert libc.mprotect(region + 2 * page * 4096, 4096, 1) == 0, ctypes.get_errno()
        page += 1
rng = random.Random(0)
generator = torch.Generator().manual_seed(0)
most, mismatches = mappings(), 0
for step in range(200):
    # A new shape each step: a new program (two dims, so no growing-shape bucket shares them).
    x = torch.rand(rng.randint(1, 300), rng.randint(1, 300), generator=generator)
    got = (x.to(device) * 3 + 1).sum().cpu()
    mismatches += not torch.allclose(got, (x * 3 + 1).sum(), rtol=1e-5)
    try:  # an op error: a C++ exception, which walks the unwinder's registered frames
        torch.ones(2, 3, device=device).view(7)
    except RuntimeError:
        pass
    most = max(most, mappings())
print(json.dumps({{"limit": limit, "most": most, "mismatches": mismatches,
                  "live": torch_tpu._C._live_executables(),
                  "lowered": torch_tpu.metrics().get("loaded_executable_cap_lowered", {{}})}}))
"""
    result = run_python(code, TORCH_TPU_SHARED_CACHE_DIR=str(tmp_path))
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["mismatches"] == 0
    assert report["most"] < report["limit"], report
    assert report["lowered"] == {"memory mappings past half of vm.max_map_count": 1}, report
    # The cap (64 here: the filler's mappings count as the programs') plus programs in flight.
    assert report["live"] <= 64 + 8, report
    assert (f"memory mappings of the {report['limit']} the kernel allows (vm.max_map_count)"
            in result.stderr)
