"""The main demo: what runs underneath the `tpu` device."""

import pprint

import torch_tpu

info = torch_tpu.runtime_info()
pprint.pprint(info, sort_dicts=False)
