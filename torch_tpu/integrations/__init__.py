"""Glue between torch_tpu and libraries that choose devices themselves.

Each submodule is imported explicitly by the user (one line), never by ``import torch_tpu``:
``torch_tpu.integrations.accelerate`` lets Hugging Face accelerate (and ``transformers.Trainer``,
which runs on it) start ``tpu_dist`` process groups. See docs/ecosystem.md.
"""
