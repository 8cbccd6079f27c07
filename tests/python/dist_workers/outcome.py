"""What a failure worker's rank reports to its test after the collective that should fail."""

import os
import sys
import time


def say(line):
    """Prints ``line`` in one write: ranks share their launcher's output pipe, and ``print``
    writes the text and its newline separately when the output is unbuffered (torchrun), so two
    ranks' lines could run together ("...reach itrank 0: ...")."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def exit_with_outcome(rank, start, call):
    """Runs ``call`` (a collective and a read of its result), then exits: 0 after ``rank r: no
    error``, or 3 after ``rank r: <error type> after <seconds since start> s: <first line>``."""
    try:
        call()
    except Exception as error:  # noqa: BLE001  (reported to the test)
        say(f"rank {rank}: {type(error).__name__} after {time.monotonic() - start:.1f} s: "
            f"{str(error).splitlines()[0]}")
        os._exit(3)  # the group cannot be shut down cleanly without its peers
    say(f"rank {rank}: no error")
    sys.exit(0)
