# Two entry points for a new machine: `make demo` and `make test`. Both run `setup`, which is
# idempotent and incremental (a venv at .venv, dependencies from pyproject.toml, an editable build
# whose CMake tree lives in build/python).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUILD_DIR := build/python
GTEST_CONFIG := /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake
OPENSSL_HEADER := /usr/include/openssl/ssl.h

.PHONY: setup demo test test-cpp test-python clean

setup: $(VENV)/.deps-installed
	$(PY) -m pip install --quiet --no-build-isolation --no-deps -e .

$(VENV)/.deps-installed: pyproject.toml tools/install_deps.py
	@if [ ! -f $(GTEST_CONFIG) ] || [ ! -f $(OPENSSL_HEADER) ] || ! command -v ccache >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get install -y -qq libgtest-dev libssl-dev ccache >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq libgtest-dev libssl-dev ccache >/dev/null)); \
	  else echo "note: install libgtest-dev, libssl-dev (and ccache) with apt to build"; fi; \
	fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) tools/install_deps.py
	touch $@

demo: setup
	$(PY) examples/demo.py

# Tests of PyTorch semantics (views, in-place, RNG, serialization, AMP, indexing, errors...) and of
# torch.compile's default backend, RNG and BatchNorm run a second time in the DeferAndFuse eager
# mode: its results must be strict mode's.
FUSE_MODE_TESTS := views copies rng serialization amp overlap indexing indexing_semantics \
  elementwise reductions dtype_views memory_format half_precision_arithmetic nan_semantics \
  factories range_factories zero_size_indexing module_to index_lowerings linalg upsample \
  group_norm embedding_bag printing out_devices dtype_domain_errors device_errors device_checks \
  multi_device threads complex compile_default_backend compile_rng compile_batch_norm \
  memory_accounting

# pytest runs two workers (pytest-xdist), a test file per worker at a time: files keep their
# once-per-process state (warnings, module fixtures) and the two long files start first.
PYTEST_PARALLEL := -n 2 --dist loadfile

test: setup
	$(VENV)/bin/ctest --test-dir $(BUILD_DIR) --output-on-failure -j2
	$(PY) -m pytest -q $(PYTEST_PARALLEL)
	TORCH_TPU_DEFER_AND_FUSE=1 $(PY) -m pytest -q $(PYTEST_PARALLEL) $(FUSE_MODE_TESTS:%=tests/python/test_%.py)

clean:
	rm -rf build $(VENV)
