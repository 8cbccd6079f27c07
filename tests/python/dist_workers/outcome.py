"""What a failure worker's rank reports to its test after the collective that should fail."""

import os
import sys
import time


def exit_with_outcome(rank, start, call):
    """Runs ``call`` (a collective and a read of its result), then exits: 0 after ``rank r: no
    error``, or 3 after ``rank r: <error type> after <seconds since start> s: <first line>``."""
    try:
        call()
    except Exception as error:  # noqa: BLE001  (reported to the test)
        print(f"rank {rank}: {type(error).__name__} after {time.monotonic() - start:.1f} s: "
              f"{str(error).splitlines()[0]}", flush=True)
        os._exit(3)  # the group cannot be shut down cleanly without its peers
    print(f"rank {rank}: no error", flush=True)
    sys.exit(0)
