"""pytest-xdist's file scheduling, made to survive a worker that dies.

`make test` runs pytest with `-n 2 --dist loadfile`. When a worker process dies (a signal, the
kernel's OOM killer), xdist 3.8's LoadFileScheduling puts the dead worker's file back on the queue
*with the test that killed it still pending*: the replacement worker runs that test again and dies
too, the other worker is handed the file and dies as well, and the controller ends up waiting for
workers that will never report, until CI's time limit ends the run with no summary at all.

Here the test that was running when the worker died is recorded as failed (xdist's own report:
"worker 'gwN' crashed while running '<test>'") and is not run again; the rest of its file runs on
the replacement worker, and the run ends with a summary that names the test.

Files are handed out in collection order, so the files that take minutes are collected first
(`LONG_FILES`): one left for the end would run on one worker while the other idles.
"""

import sys

import pytest

try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pytest-xdist not installed: plain pytest needs none of this
    LoadFileScheduling = None


if LoadFileScheduling is not None:

    class CrashTolerantFileScheduling(LoadFileScheduling):
        """LoadFileScheduling whose `remove_node` marks a dead worker's running test complete."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            # The files each worker was given, in order: a death can come from what an earlier
            # file left in the process (a native library's signal disposition, a thread).
            self.files_run = {}

        def _assign_work_unit(self, node):
            self.files_run.setdefault(node.gateway.id, []).append(next(iter(self.workqueue)))
            super()._assign_work_unit(node)

        def remove_node(self, node):
            workload = self.assigned_work.pop(node)
            if not self._pending_of(workload):
                return None
            # A worker runs its tests in the order they were sent: the first one not reported is
            # the one it was running when it died.
            crashed = next(nodeid for work_unit in workload.values()
                           for nodeid, completed in work_unit.items() if not completed)
            for scope, work_unit in workload.items():
                if crashed in work_unit:
                    work_unit[crashed] = True
                if not all(work_unit.values()):
                    self.workqueue[scope] = work_unit
            files = self.files_run.get(node.gateway.id, [])
            sys.stderr.write(f"\n[{node.gateway.id}] died while running {crashed}; "
                             "the rest of its file goes to another worker. Files it was given: "
                             f"{' '.join(files)}\n")
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

    class CrashTolerantSchedulingPlugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_xdist_make_scheduler(self, config, log):
            if config.getvalue("dist") == "loadfile":
                return CrashTolerantFileScheduling(config, log)
            return None


# Measured with `pytest -n 2 --dist loadfile --durations=0` (seconds of tests per file): the AOT
# record and OpInfo files run longest (pyproject's testpaths lists them first too); timm's models
# take about 3 minutes and sort near the end of tests/python.
LONG_FILES = ("tests/test_tpu_aot.py", "tests/test_opinfo.py", "tests/python/test_timm_models.py")


def pytest_collection_modifyitems(config, items):
    rank = {path: n for n, path in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


def pytest_configure(config):
    # Registered only where xdist runs: with `-p no:xdist` its hooks are unknown to pytest.
    if LoadFileScheduling is not None and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(CrashTolerantSchedulingPlugin(), "crash_tolerant_scheduling")
