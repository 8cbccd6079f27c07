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

test: setup
	$(VENV)/bin/ctest --test-dir $(BUILD_DIR) --output-on-failure -j2
	$(PY) -m pytest -q

clean:
	rm -rf build $(VENV)
