"""Install what building and testing torch_tpu needs, read from pyproject.toml (declared once).

Builds run without pip's build isolation (an isolated build would download a CUDA torch), so the
build requirements are installed here next to the runtime and test dependencies. Everything goes
through one pip call, so the pinned torch constrains every other package: a test extra such as
transformers (no torch requirement of its own) can never pull in a different torch.
"""

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
    + ["cmake>=3.22", "ninja"]
)
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", *requirements])
