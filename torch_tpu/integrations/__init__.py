"""Glue between torch_tpu and libraries that choose devices themselves (docs/ecosystem.md).

torch_tpu loads each submodule once its library has been imported, so user code needs no line:
``accelerate`` lets Hugging Face accelerate (and ``transformers.Trainer``, which runs on it) make
``tpu_dist`` ranks; ``lightning`` registers PyTorch Lightning's ``accelerator="torch_tpu"``.
"""
