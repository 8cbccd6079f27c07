"""Python's signal table kept in step with signals a native library ignores.

libtpu sets SIGPROF to SIG_IGN when it starts (its profiler's timer sends SIGPROF) without telling
Python, whose table still says SIG_DFL, the disposition it read at startup. A library that saves
every handler and restores them later (PyTorch Lightning's signal connector does, at the end of
each fit) then sets SIGPROF back to SIG_DFL, and libtpu's next SIGPROF ends the process
("Profiling timer expired"). Recording SIG_IGN in Python's table for the signals the process
already ignores makes such a restore restore what is really there.
"""

from __future__ import annotations

import signal
import threading


def _ignored_by_the_process() -> set[int]:
    """Signals whose disposition is SIG_IGN (Linux: the SigIgn mask of /proc/self/status)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("SigIgn:"):
                    mask = int(line.split()[1], 16)
                    return {n for n in range(1, mask.bit_length() + 1) if mask >> (n - 1) & 1}
    except OSError:
        pass
    return set()


def adopt_ignored_signals() -> None:
    """Records SIG_IGN in Python's table for each signal the process ignores while Python
    believes it has its default disposition. Only the main thread may set handlers; elsewhere
    this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    for number in _ignored_by_the_process():
        try:
            if signal.getsignal(number) == signal.SIG_DFL:
                signal.signal(number, signal.SIG_IGN)
        except (OSError, ValueError):  # not a settable signal (SIGKILL, real-time ones in use)
            continue
