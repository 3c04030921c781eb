# dsv41_jax: `make demo` runs the main job, `make test` the test suite (what CI runs).
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
# jax 0.11 needs Python >= 3.12: a working python3.12 on PATH (a pyenv shim may exist and fail),
# else pyenv's newest 3.12.x.
PYTHON312 ?= $(shell for p in $$(command -v python3.12) \
  $$(ls -d $(HOME)/.pyenv/versions/3.12.*/bin/python3.12 2>/dev/null | sort -rV); do \
  $$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && echo $$p && break; done)
# On a machine with an NVIDIA GPU, JAX's CUDA 13 build (the `cuda13` extra); else plain jax (CPU).
# Override with `make JAX_EXTRA=` (force CPU) or `make JAX_EXTRA=cuda13`.
JAX_EXTRA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda13)
# CUDA=0 skips the CUDA extension even where nvcc is on PATH (a pure-Python install in seconds):
# DSV41_BUILD_CUDA=OFF, read by the build (pyproject.toml: no CMake at all) and by the tests.
CUDA ?= 1
ifeq ($(CUDA),0)
export DSV41_BUILD_CUDA := OFF
endif
# The jax and jaxlib release installed: 0.11.2, the one the GPU suite has passed on; the CPU
# suite passes on 0.12.1 too (docs/install.md, "JAX versions"), e.g. in a venv of its own:
# `make JAX_VERSION=0.12.1 VENV=.venv-jax0.12.1 test`.
JAX_VERSION ?= 0.11.2
NVCC := $(shell command -v nvcc)
comma := ,
EXTRAS := test$(if $(JAX_EXTRA),$(comma)$(JAX_EXTRA))
say = @echo "[dsv41_jax] $(1)"
# Build inputs: a change to any of them rebuilds the extension.
BUILD_INPUTS := pyproject.toml CMakeLists.txt $(wildcard ffi/* cuda/*)
STAMP := $(VENV)/.installed
export PYTHONPATH := $(CURDIR)

.PHONY: install test test-newest-jax wheel-check demo lint typecheck bench benchmarks clean

install: $(STAMP)

$(PY):
	@if [ -z "$(PYTHON312)" ]; then \
	  echo "error: Python 3.12 not found (need python3.12 on PATH or pyenv's 3.12.x; jax 0.11 requires >= 3.12)"; \
	  exit 1; fi
	$(call say,1/4 creating $(VENV) with $(PYTHON312))
	@$(PYTHON312) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip

# No build isolation: CMake reads the XLA FFI headers of the jaxlib in the venv, and DeepGEMM's
# headers from sgl-deep-gemm (never imported: its torch extension does not load with every torch).
$(STAMP): $(PY) $(BUILD_INPUTS)
	$(call say,2/4 installing build tools and jax $(JAX_VERSION) ($(if $(JAX_EXTRA),CUDA 13 build: a GPU was found,CPU build: no GPU found)))
	@$(PY) -m pip install -q "scikit-build-core>=1.1" "pybind11>=2.12" \
	  "jax$(if $(JAX_EXTRA),[$(JAX_EXTRA)])==$(JAX_VERSION)" "jaxlib==$(JAX_VERSION)"
	$(call say,3/4 installing sgl-deep-gemm 0.2.5 (DeepGEMM's kernel headers; never imported))
	@$(PY) -m pip install -q --no-deps "sgl-deep-gemm==0.2.5"
	$(call say,4/4 building and installing dsv41_jax[$(EXTRAS)]: $(if $(filter 0,$(CUDA)),pure Python (CUDA=0),$(if $(NVCC),the CUDA extension with $(NVCC): about 1-2 min on a quiet machine$(comma) one line per compiled file below (CUDA=0 skips it),pure Python (no nvcc on PATH))))
	@start=$$(date +%s); set -o pipefail; \
	$(PY) -m pip install -v --no-build-isolation ".[$(EXTRAS)]" 2>&1 | tee $(VENV)/install.log \
	  | { grep --line-buffered -E '^ *\[[0-9]+/[0-9]+\] ' || true; } \
	  | sed -u -E 's#^ *(\[[0-9]+/[0-9]+\]) Building [A-Z]+ object CMakeFiles/[^/]+\.dir/(.*)\.o$$#\1 \2#; s#^ *#[dsv41_jax]     #' \
	  || { echo "[dsv41_jax] install failed; the end of $(VENV)/install.log:"; tail -40 $(VENV)/install.log; exit 1; }; \
	echo "[dsv41_jax] 4/4 done in $$(( $$(date +%s) - start )) s (full log: $(VENV)/install.log)"
	@$(PY) -c "import jax; from dsv41_jax import _ext; print('[dsv41_jax] installed; CUDA extension:', 'built' if _ext.available() else 'not built ($(if $(filter 0,$(CUDA)),CUDA=0,needs nvcc >= 12.9 on PATH))', '| jax backend:', jax.default_backend())"
	@touch $@

# The tests spread over the CPU's cores (pytest-xdist, at most 4 processes) where no GPU is found;
# with a GPU in one process, as each process would claim the GPU's memory (TEST_WORKERS=0 runs
# one process anywhere). Then the failures, the skipped tests by reason (tests/_summary.py) and
# the 15 slowest tests. The GPU tests skip on a CPU-only machine.
TEST_WORKERS ?= $(if $(JAX_EXTRA),0,auto)
TESTS ?= tests
test: install
	$(call say,running $(if $(filter tests,$(TESTS)),the test suite,$(words $(TESTS)) test files) on jax $$($(PY) -c 'import jax; print(jax.__version__)') ($(if $(filter 0,$(TEST_WORKERS)),one process,over the CPU's cores); GPU tests skip without a GPU))
	$(PY) -m pytest $(TESTS) -n $(TEST_WORKERS) --maxprocesses 4 --durations=15

# The newest jax pyproject.toml allows, in a venv of its own (CI's second run, .ci/run): the
# type checks and the tests of the Pallas kernels, their lowering, the plans and the API. The
# whole suite runs on JAX_VERSION (`make test`). The extension builds in a folder of its own,
# against that venv's jaxlib.
NEWEST_JAX := 0.12.1
NEWEST_JAX_TESTS := tests/test_types.py tests/test_topk.py tests/test_block_amax.py \
  tests/test_mgpu_select.py tests/test_plan.py tests/test_op_plans.py tests/test_layer_plan.py \
  tests/test_ext.py tests/test_info.py tests/test_status.py tests/test_api_docs.py \
  tests/test_api_properties.py tests/test_docs.py
test-newest-jax:
	@SKBUILD_BUILD_DIR=build/jax$(NEWEST_JAX) $(MAKE) --no-print-directory \
	  VENV=.venv-jax$(NEWEST_JAX) JAX_VERSION=$(NEWEST_JAX) TESTS="$(NEWEST_JAX_TESTS)" test

# The wheel as a user meets it (CI's last step, .ci/run), in a temporary folder: a fresh venv,
# whose pip builds the pure-Python wheel as `pip wheel` does for a user (an isolated build;
# `-C dsv41.cuda=false`: no CMake run, seconds) and installs it with its dependencies and jax
# $(JAX_VERSION) (CPU). scripts/wheel_check.py then runs there, outside the checkout, with
# `python -I` and PYTHONPATH unset, so only the installed wheel can be imported: the wheel's
# file list (the package and its metadata only), the version, one op against numpy.
wheel-check:
	$(call say,wheel-check: the pure-Python wheel and jax $(JAX_VERSION) (CPU) in a fresh venv)
	@set -e; unset PYTHONPATH; start=$$(date +%s); tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON312) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip wheel -q --no-deps -C dsv41.cuda=false \
	  -C build-dir="$$tmp/build" -w "$$tmp/dist" .; \
	"$$tmp/venv/bin/python" -m pip install -q "$$tmp"/dist/*.whl \
	  "jax==$(JAX_VERSION)" "jaxlib==$(JAX_VERSION)"; \
	cd "$$tmp" && JAX_PLATFORMS=cpu venv/bin/python -I "$(CURDIR)/scripts/wheel_check.py" dist/*.whl; \
	echo "[dsv41_jax] wheel-check passed in $$(( $$(date +%s) - start )) s"

demo: install
	$(PY) examples/decode_step.py

# ruff pinned: a new release's rules or formatting must not fail CI on unchanged code.
LINTED := dsv41_jax benchmarks tests examples scripts
# The project's C++ / CUDA (.clang-format); DeepGEMM's headers are not ours.
CXX_LINTED := $(shell find ffi cuda tests/simt scripts/probes -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.cc' -o -name '*.h' \) | sort)
lint: install
	$(PY) -m pip install -q "ruff==0.17.6" "clang-format==23.1.5"
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	@echo "$(VENV)/bin/clang-format --dry-run --Werror ($(words $(CXX_LINTED)) C++ / CUDA files)"
	@$(VENV)/bin/clang-format --dry-run --Werror $(CXX_LINTED)

# BENCHMARKS.md from BENCHMARKS_HISTORY.md (after a run's section is added there).
benchmarks: install
	$(PY) -m benchmarks.report

# mypy -p dsv41_jax -p benchmarks with [tool.mypy] of pyproject.toml (tests/test_types.py runs
# it too).
typecheck: install
	$(PY) -m mypy -p dsv41_jax -p benchmarks

clean:
	rm -rf $(VENV) .venv-jax$(NEWEST_JAX) build dist *.egg-info .pytest_cache .mypy_cache
