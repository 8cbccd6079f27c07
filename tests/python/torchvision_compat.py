"""Lets torchvision import in a venv whose torch is the CPU build (the `test` extra's timm pulls
torchvision from PyPI, whose Linux wheels are CUDA builds).

Such a torchvision cannot load its ops library (torchvision/_C.so links libtorch_cuda.so) and
then fails at import in two unguarded fake registrations ("operator torchvision::nms does not
exist"); anything importing it fails too, Lightning included (torchmetrics imports torchvision
when it is installed). Declaring the two schemas, without kernels, lets the pure-Python part load;
a torchvision built for this torch loads its library and nothing is declared.
"""

import glob
import importlib.util
import os

import torch

_NMS_SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"


def _ops_library_loads(package_dir):
    try:
        for library in glob.glob(os.path.join(package_dir, "_C*.so")):
            torch.ops.load_library(library)
    except OSError:  # built against another libtorch (CUDA)
        return False
    return True


def make_torchvision_importable():
    spec = importlib.util.find_spec("torchvision")
    if spec is None or _ops_library_loads(os.path.dirname(spec.origin)):
        return
    for name in ("nms", "qnms"):
        if not hasattr(torch.ops.torchvision, name):  # declared already (e.g. by another test)
            torch.library.define(f"torchvision::{name}", _NMS_SCHEMA)
