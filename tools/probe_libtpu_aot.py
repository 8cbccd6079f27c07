"""Probe libtpu's deviceless AOT path on this machine and print what works.

Each probe runs in a fresh subprocess (libtpu reads its environment once, at load): create a
topology by name and compile a tiny StableHLO module for it through torch_tpu's PJRT wrappers,
under a few environments; then, when JAX is importable (``--jax PYTHON`` names an interpreter that
has jax and libtpu), the same through ``jax.experimental.topologies`` for comparison::

    .venv/bin/python tools/probe_libtpu_aot.py
    .venv/bin/python tools/probe_libtpu_aot.py --jax /tmp/jaxvenv/bin/python --names v5e:2x2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

MODULE = """module @probe {
  func.func public @main(%arg0: tensor<128x128xf32>) -> tensor<128x128xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<128x128xf32>
    return %0 : tensor<128x128xf32>
  }
}"""

OURS = """
import sys, torch_tpu._C as C, torch_tpu._plugin as p, os
path = os.path.join(p._package_dir("libtpu"), "libtpu.so")
try:
    t = C._PjrtTopology(path, sys.argv[1])
    r = t.compile(sys.argv[2])
    print(f"OK {t.device_kinds[0]} x{len(t.device_kinds)}: memory {r['memory']}")
except Exception as e:
    print("FAILED", str(e).splitlines()[0])
"""

JAX = """
import sys, jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
try:
    t = topologies.get_topology_desc(sys.argv[1], "tpu")
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32, sharding=SingleDeviceSharding(t.devices[0]))
    c = jax.jit(lambda a: a + a).trace(x).lower(lowering_platforms=("tpu",)).compile()
    print(f"OK jax {jax.__version__} {t.devices[0].device_kind} x{len(t.devices)}: "
          f"{c.memory_analysis()}")
except Exception as e:
    print("FAILED", str(e).splitlines()[0])
"""

ENVIRONMENTS = {
    "no variables (metadata server queried)": {},
    "TPU_SKIP_MDS_QUERY=1": {"TPU_SKIP_MDS_QUERY": "1"},
    "torch_tpu.aot's defaults": {"TPU_SKIP_MDS_QUERY": "1", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
                                 "TPU_WORKER_HOSTNAMES": "localhost"},
}


def run(python: str, code: str, name: str, env: dict, timeout: int) -> str:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TPU_SKIP_MDS_QUERY", "ALLOW_MULTIPLE_LIBTPU_LOAD",
                          "TPU_WORKER_HOSTNAMES")}
    try:
        out = subprocess.run([python, "-c", code, name, MODULE], env={**clean, **env},
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"FAILED: no answer within {timeout} s"
    lines = [line for line in out.stdout.splitlines() if line.startswith(("OK", "FAILED"))]
    return lines[-1] if lines else f"FAILED (exit {out.returncode}): {out.stderr.strip()[-300:]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", default="v5e:2x2,v6e:2x2,v5p:2x2x1,tpu7x:2x2x1,v7x:2x2x1")
    parser.add_argument("--jax", default="", help="a Python interpreter with jax and libtpu")
    parser.add_argument("--slow", action="store_true",
                        help="also probe without TPU_SKIP_MDS_QUERY (minutes of retries)")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args()
    from importlib import metadata

    print(f"libtpu {metadata.version('libtpu')}")
    for label, env in ENVIRONMENTS.items():
        if not env and not args.slow:
            continue
        for name in args.names.split(","):
            print(f"[torch_tpu, {label}] {name}: "
                  f"{run(sys.executable, OURS, name, env, args.timeout)}")
    if args.jax:
        env = ENVIRONMENTS["torch_tpu.aot's defaults"]
        for name in args.names.split(","):
            print(f"[jax, torch_tpu.aot's defaults] {name}: "
                  f"{run(args.jax, JAX, name, env, args.timeout)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
