# dsv41_jax: `make demo` runs the main job, `make test` the test suite (what CI runs).
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
# jax 0.11 needs Python >= 3.12: a working python3.12 on PATH (a pyenv shim may exist and fail),
# else pyenv's newest 3.12.x.
PYTHON312 ?= $(shell for p in $$(command -v python3.12) \
  $$(ls -d $(HOME)/.pyenv/versions/3.12.*/bin/python3.12 2>/dev/null | sort -rV); do \
  $$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && echo $$p && break; done)
# Build inputs: a change to any of them rebuilds the extension.
BUILD_INPUTS := pyproject.toml CMakeLists.txt $(wildcard ffi/* cuda/*)
STAMP := $(VENV)/.installed
export PYTHONPATH := $(CURDIR)

.PHONY: install test demo lint bench clean

install: $(STAMP)

$(PY):
	@if [ -z "$(PYTHON312)" ]; then \
	  echo "error: Python 3.12 not found (need python3.12 on PATH or pyenv's 3.12.x; jax 0.11 requires >= 3.12)"; \
	  exit 1; fi
	$(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# No build isolation: CMake reads the XLA FFI headers of the jaxlib in the venv, and DeepGEMM's
# headers from sgl-deep-gemm (never imported: its torch extension does not load with every torch).
$(STAMP): $(PY) $(BUILD_INPUTS)
	$(PY) -m pip install -q "scikit-build-core>=0.10" "pybind11>=2.12" "jax==0.11.2" "jaxlib==0.11.2"
	$(PY) -m pip install -q --no-deps "sgl-deep-gemm==0.2.5"
	$(PY) -m pip install -q --no-build-isolation ".[test]"
	@$(PY) -c "from dsv41_jax import _ext; print('dsv41_jax installed; CUDA extension:', 'built' if _ext.available() else 'not built (no nvcc)')"
	@touch $@

test: install
	$(PY) -m pytest -q tests

demo: install
	$(PY) examples/decode_step.py

lint: install
	$(PY) -m pip install -q ruff
	$(PY) -m ruff check dsv41_jax tests examples

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
