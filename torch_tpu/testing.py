"""Testing hooks for code that must survive device and cache failures (docs/semantics.md).

``inject_failure(site, count=1)`` makes the next ``count`` steps of one kind fail exactly as the
plugin or a cache store would fail them:

- ``"compile"``: the next program compiles (a cache miss) fail with the plugin's kind of error;
- ``"execute"``: the next program executions fail on the device (their outputs are failed
  buffers, as after a device fault);
- ``"transfer"``: the next host-to-device or device-to-host copies fail;
- ``"store_read"`` / ``"store_write"``: the next reads / writes of the compilation cache's shared
  or persistent tier fail as an unreachable store would (the store is then switched off for the
  process, with its one warning).

Injected failures are counted in ``torch_tpu.metrics()["injected_failures"]`` (site -> count) and
carry the text ``injected <site> failure (torch_tpu.testing)``. Use it as a context manager to
disarm what was not used up::

    with torch_tpu.testing.inject_failure("execute"):
        ...
"""

from __future__ import annotations

from torch_tpu import _C

__all__ = ["inject_failure", "injected_failures_pending", "SITES"]

SITES = ("compile", "execute", "transfer", "store_read", "store_write")


class inject_failure:  # noqa: N801  (used like a function, as torch's context managers are)
    """Arm ``count`` failures of ``site``; as a context manager, disarm the rest on exit."""

    def __init__(self, site: str, count: int = 1) -> None:
        _C._inject_failures(site, int(count))
        self.site = site

    def __enter__(self) -> "inject_failure":
        return self

    def __exit__(self, *exc_info) -> None:
        _C._inject_failures(self.site, 0)


def injected_failures_pending(site: str) -> int:
    """How many armed failures of ``site`` have not happened yet."""
    return _C._injected_failures_pending(site)
