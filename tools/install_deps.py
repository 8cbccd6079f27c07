"""Install what building and testing torch_tpu needs, read from pyproject.toml (declared once).

Builds run without pip's build isolation (an isolated build would download a CUDA torch), so the
build requirements are installed here next to the runtime and test dependencies. Everything goes
through one pip call, so the pinned torch constrains every other package: a test extra such as
transformers (no torch requirement of its own) can never pull in a different torch.

torchvision (timm needs it) comes from PyPI as well, pinned to 0.28, the release built for torch
2.13. Its Linux wheel there is a CUDA build: its C++ ops library needs a CUDA torch and does not load
beside the CPU torch, and `import torchvision` then fails ("operator torchvision::nms does not
exist"), and with it everything that imports torchvision when it finds it installed (transformers'
model classes, torchmetrics and so Lightning, accelerate's CLI). The CPU build lives on PyTorch's
own wheel index, which the machines this runs on (developers', CI) cannot reach: only PyPI. So the
`vision` extra (timm, torchvision) goes into a folder of its own that only
tests/python/test_timm_models.py puts on sys.path (docs/ecosystem.md, timm).
"""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

root = Path(__file__).resolve().parent.parent
project = tomllib.loads((root / "pyproject.toml").read_text())
requirements = (
    project["build-system"]["requires"]
    + project["project"]["dependencies"]
    + project["project"]["optional-dependencies"]["test"]
    + project["project"]["optional-dependencies"]["bench"]
    # The kernel tests (tests/python/test_pallas*.py, test_tokamax.py, test_helion.py) need them.
    + project["project"]["optional-dependencies"]["kernels"]
    + ["cmake>=3.22", "ninja"]
)
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", *requirements])

# torchtitan (tests/python/test_torchtitan.py) goes in without its dependencies, so it is not in
# the test extra: torchtitan 0.3.0 requires datasets<4.8, which requires huggingface-hub<2 while
# transformers 5 requires >=2.4, and tyro, which requires typeguard>=4 while tokamax pins 2.13.3;
# a resolver would downgrade huggingface-hub and break transformers (and typeguard, tokamax). Its
# model and FSDP code import only spmd_types and tyro (which imports without typeguard 4) beyond
# torch; its trainer's data, logging and checkpoint packages are not needed there.
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                       "torchtitan==0.3.0", "spmd_types==0.2.3", "tyro==1.0.17",
                       "docstring-parser>=0.16"])

# The vision extra, without dependencies (timm's others, huggingface-hub, pyyaml and safetensors,
# and torchvision's, numpy and pillow, are installed above) so pip never resolves torch again.
vision_folder = Path(sys.prefix) / "vision-extra"
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade",
                       "--target", str(vision_folder),
                       *project["project"]["optional-dependencies"]["vision"]])


def install_nginx() -> None:
    """The compilation cache's HTTP tier is tested against a real WebDAV server (Debian's nginx,
    whose dav module accepts PUT). Installed when missing and this runs as root; otherwise the
    note says what to install."""
    if shutil.which("nginx") or os.path.exists("/usr/sbin/nginx"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print("note: install nginx (Debian: apt-get install nginx) to run tests/python/"
              "test_cache_http.py")
        return
    quiet = {"stdout": subprocess.DEVNULL, "env": {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx"]
    if subprocess.call(install, **quiet) != 0:
        subprocess.check_call(["apt-get", "update", "-qq"], **quiet)
        subprocess.check_call(install, **quiet)


install_nginx()
