import atexit
import faulthandler
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

# Two CPU-plugin devices, so multi-device placement is tested; set before torch_tpu starts.
os.environ.setdefault("TORCH_TPU_NUM_CPU_DEVICES", "2")
# JAX (the kernel tests) uses its CPU backend only: found installed, libtpu would start as a JAX
# backend in a test process and ignore SIGPROF there (torch_tpu/_signals.py) for later files.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The CPU references must be right. PyTorch's float32 erf/exp/sin/tanh on more than 2048 elements
# go through MKL's vector math on two OpenMP threads. MKL picks its instruction-set kernels on
# first use, and when the first call of a process runs on two threads at once, about one process
# in four computes one thread's half about 2e-4 off (measured on this 2-core host; a single-threaded
# first call, or a fixed instruction set, never is). Fixing the set removes that race for the test
# processes and every process they start.
os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", "AVX2")
# The host-shared cache tier is this run's own: tests (and the processes they start) share
# compiled programs with each other, never with earlier runs, so compile counts are the same on
# a developer's machine as on a clean CI machine.
if "TORCH_TPU_SHARED_CACHE_DIR" not in os.environ:
    _shared_cache = tempfile.mkdtemp(prefix="torch_tpu-tests-",
                                     dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.environ["TORCH_TPU_SHARED_CACHE_DIR"] = _shared_cache
    atexit.register(shutil.rmtree, _shared_cache, ignore_errors=True)
# So is PyTorch's own cache directory (AOTAutograd's cache keeps the "tpu" backend's traced
# graphs there, torch_tpu/_dynamo/output_code.py; Inductor's FX graph cache is there too).
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _torch_cache = tempfile.mkdtemp(prefix="torch_tpu-tests-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _torch_cache
    atexit.register(shutil.rmtree, _torch_cache, ignore_errors=True)

# A worker that crashes (pytest-xdist: "node down") takes its stderr with it: each worker writes
# its fatal-signal traceback (every thread, Python and the native frame it was in) to a file of
# its own in this directory, and the run prints the non-empty ones at its end.
if "TORCH_TPU_TEST_FAULTS_DIR" not in os.environ:
    _faults = tempfile.mkdtemp(prefix="torch_tpu-test-faults-")
    os.environ["TORCH_TPU_TEST_FAULTS_DIR"] = _faults
    atexit.register(shutil.rmtree, _faults, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: F401  (registers the device even when autoload is disabled)


_fault_log = None


def pytest_sessionstart(session):
    global _fault_log
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # after pytest's own faulthandler setup, which writes to the lost stderr
        path = os.path.join(os.environ["TORCH_TPU_TEST_FAULTS_DIR"], f"{worker}.log")
        _fault_log = open(path, "a")  # noqa: SIM115  (open while the worker lives)
        faulthandler.enable(file=_fault_log, all_threads=True)


def pytest_terminal_summary(terminalreporter):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    directory = os.environ["TORCH_TPU_TEST_FAULTS_DIR"]
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as log:
            text = log.read()
        if text.strip():
            terminalreporter.section(f"fatal error in worker {name[:-4]}", sep="=")
            terminalreporter.write(text[-20000:] + "\n")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (for settings read once per process)."""
    environment = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(autouse=True)
def _strict_mode_when_marked(request, monkeypatch):
    """`@pytest.mark.strict_mode` tests run in strict mode even when the suite runs under
    TORCH_TPU_DEFER_AND_FUSE=1 (the processes they start too)."""
    if request.node.get_closest_marker("strict_mode") is None:
        yield
        return
    monkeypatch.delenv("TORCH_TPU_DEFER_AND_FUSE", raising=False)
    with torch_tpu.eager_mode("strict"):
        yield


@pytest.fixture
def quiet_collector():
    """No garbage from earlier tests may be freed while a test measures memory deltas."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.fixture
def tpu():
    return torch.device("tpu")


def assert_same(tpu_result: torch.Tensor, cpu_result: torch.Tensor, **tolerances):
    """A tpu result equals PyTorch's CPU result: dtype, shape and values."""
    assert tpu_result.device.type == "tpu"
    assert tpu_result.dtype == cpu_result.dtype
    assert tpu_result.shape == cpu_result.shape
    torch.testing.assert_close(tpu_result.cpu(), cpu_result, **tolerances)


def sample(shape, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 3).to(dtype)
    low = 0 if dtype == torch.uint8 else -5
    return torch.randint(low, 6, shape, generator=generator).to(dtype)


def _outcome(make, device):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback, resize and deprecation notices
        try:
            return make(device), None
        except Exception as error:  # noqa: BLE001  (compared by the caller)
            return None, error


def assert_like_cpu(make, message=None, **tolerances):
    """`make(device)` gives on tpu what it gives on CPU: the same tensor (assert_same) or value, or
    the same exception type with CPU's first message line (or `message`, where ours says more)."""
    cpu_result, cpu_error = _outcome(make, "cpu")
    tpu_result, tpu_error = _outcome(make, "tpu")
    if cpu_error is not None:
        assert tpu_error is not None, f"CPU raised {cpu_error!r}, tpu returned {tpu_result}"
        assert type(tpu_error) is type(cpu_error), (cpu_error, tpu_error)
        assert str(tpu_error).split("\n")[0] == (message or str(cpu_error).split("\n")[0])
        return
    assert tpu_error is None, f"tpu raised {tpu_error!r}"
    if isinstance(cpu_result, torch.Tensor):
        assert_same(tpu_result, cpu_result, **tolerances)
    else:
        assert tpu_result == cpu_result


def assert_raises_exactly(exception_type, text, call):
    """call() raises exactly `exception_type`, whose message (first line) is `text`."""
    _, error = _outcome(lambda _: call(), "tpu")
    assert type(error) is exception_type, repr(error)
    assert str(error).split("\n")[0] == text


def compiles(fn) -> int:
    """Programs compiled while `fn` runs (work launched before it is finished first)."""
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    fn()
    torch.tpu.synchronize()
    return torch_tpu.metrics()["compile_count"]
