"""Signals a native library ignores stay ignored when Python code saves and restores handlers.

libtpu (loaded here by an ahead-of-time compile) sets SIGPROF to SIG_IGN behind Python's back;
PyTorch Lightning restores every handler it saved at the end of a fit, which set SIGPROF back to
SIG_DFL and the process died at libtpu's next SIGPROF ("Profiling timer expired")."""

import importlib.util
import signal

import pytest
import torch

from torch_tpu import _signals, aot


def test_the_signals_the_process_ignores_are_read_from_the_kernel():
    # SIGUSR2: nobody here sends it (SIGPROF may come from libtpu's timer once it has started).
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        assert signal.SIGUSR2 in _signals._ignored_by_the_process()
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        assert signal.SIGUSR2 not in _signals._ignored_by_the_process()
    finally:
        signal.signal(signal.SIGUSR2, previous)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed")
def test_after_libtpu_starts_a_saved_and_restored_sigprof_stays_ignored():
    a = torch.ones(8, 8, device="tpu")
    with aot.capture_modules() as captured:
        (a @ a).cpu()
    (text,) = [module for _, module in captured]
    aot.compile_module("v5e", text)
    if signal.SIGPROF not in _signals._ignored_by_the_process():
        pytest.skip("this libtpu does not ignore SIGPROF")
    saved = signal.getsignal(signal.SIGPROF)  # what Lightning's signal connector saves
    signal.signal(signal.SIGPROF, saved)  # ... and restores after fit
    assert saved == signal.SIG_IGN
    assert signal.SIGPROF in _signals._ignored_by_the_process()
    signal.raise_signal(signal.SIGPROF)  # ignored: the process goes on
