#!/usr/bin/env bash
# Everything the GPU needs in one device call: install the carried wheels, build
# the extension with the device's own Python, run the GPU tests, the sanitizers and the quick
# benchmark. Steps: build test suite tests:<pytest args> sanitize demo bench probe:<file>
# cuprobe:<file.cu>[:<MACRO>] ffiprobe:<file.cu> (default: build test bench); BENCH_ARGS adds benchmark options
# (e.g. "--only sort,topk --breakdown"); PYTEST_K selects tests within the tests: step
# (pytest -k); SANITIZE_MEMCHECK / SANITIZE_SECTIONS name the memcheck / racecheck sections
# (default: all of scripts/sanitize_run.py).
# The build goes to build/device (ignored by git), so a later call on the same warm machine
# reuses it. DSV41_PREBUILT=<dir> (an extension built elsewhere for CPython 3.12, carried in an
# ignored folder) skips the build when it imports on this machine.
# Full logs go to $OUT; a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dsv41_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
STEPS=${*:-build test bench}
summary=()
note() { summary+=("$1"); echo "== $1"; }

# sgl-deep-gemm is carried as a wheel (.whl/, made by scripts/fetch_wheels.sh): headers only.
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
BUILD=${BUILD_DIR:-$PWD/build/device}
if [ -n "${DSV41_PREBUILT:-}" ] && PYTHONPATH=$DSV41_PREBUILT $PY -c "import _dsv41_jax_ext" 2>/dev/null; then
  BUILD=$(cd "$DSV41_PREBUILT" && pwd); STEPS=${STEPS//build/}; note "prebuilt extension from $DSV41_PREBUILT"
fi
export PYTHONPATH=$BUILD:/tmp/site:$PWD
# Multi-GPU machines: NVLink multicast stays off (shared hosts).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DSV41_COMMIT=${DSV41_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

for step in $STEPS; do
  case $step in
    build)
      t0=$SECONDS
      if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
           -DPython_EXECUTABLE="$(command -v $PY)" -Dpybind11_DIR="$($PY -m pybind11 --cmakedir)" \
           >"$OUT/cmake.log" 2>&1 && ninja -C "$BUILD" >"$OUT/build.log" 2>&1; then
        note "build ok ($((SECONDS - t0)) s)"
      else
        tail -40 "$OUT/cmake.log" "$OUT/build.log"; note "build FAILED"; break
      fi ;;
    test)
      $PY -m pytest -q -m gpu tests -p no:cacheprovider >"$OUT/pytest.log" 2>&1
      note "gpu tests: $(tail -1 "$OUT/pytest.log")"
      grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20 ;;
    suite)  # every GPU test in two processes, test_topk.py beside the rest: about half the time
      $PY -m pytest -q -m gpu tests/test_topk.py -p no:cacheprovider >"$OUT/pytest_topk.log" 2>&1 &
      $PY -m pytest -q -m gpu tests --ignore=tests/test_topk.py -p no:cacheprovider \
        >"$OUT/pytest_rest.log" 2>&1
      wait
      for part in topk rest; do
        note "gpu tests ($part): $(tail -1 "$OUT/pytest_$part.log")"
        grep -E "^(FAILED|ERROR)" "$OUT/pytest_$part.log" | head -20
      done ;;
    tests:*)
      args=${step#tests:}
      log="$OUT/pytest_$(echo "$args" | tr -c 'a-zA-Z0-9_' '_' | cut -c1-40).log"
      $PY -m pytest -q -m gpu ${args//,/ } ${PYTEST_K:+-k "$PYTEST_K"} -p no:cacheprovider >"$log" 2>&1
      note "gpu tests ${args}: $(tail -1 "$log")"
      grep -E "^(FAILED|ERROR)" "$log" | head -20 ;;
    sanitize)
      # memcheck over every section in one process; racecheck one section per process, so a
      # sanitizer crash names its op.
      compute-sanitizer --tool memcheck --error-exitcode 3 $PY scripts/sanitize_run.py \
        ${SANITIZE_MEMCHECK:-} >"$OUT/sanitize_memcheck.log" 2>&1
      note "compute-sanitizer memcheck: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitize_memcheck.log" | tail -1)"
      for section in ${SANITIZE_SECTIONS:-logits sort physical topk filter short topc sparse onchip prefill amax fused}; do
        compute-sanitizer --tool racecheck --error-exitcode 3 $PY scripts/sanitize_run.py $section \
          >"$OUT/sanitize_racecheck_$section.log" 2>&1
        note "compute-sanitizer racecheck $section: rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/sanitize_racecheck_$section.log" | tail -1)"
      done ;;
    demo)
      $PY examples/decode_step.py >"$OUT/demo.log" 2>&1
      note "demo rc=$?"; cat "$OUT/demo.log" ;;
    bench)
      quick=--quick; [ "${BENCH_QUICK:-1}" = 0 ] && quick=
      $PY -m benchmarks $quick ${BENCH_ARGS:-} --out "$OUT/bench.md" >"$OUT/bench.log" 2>&1
      note "bench rc=$?"; cat "$OUT/bench.md" 2>/dev/null || tail -30 "$OUT/bench.log" ;;
    cuprobe:*)  # cuprobe:<file.cu>[:<MACRO>]: a CUDA probe built with nvcc for sm_90a, then run
      spec=${step#cuprobe:}; f=${spec%%:*}; def=; [ "$spec" != "$f" ] && def=${spec#*:}
      log="$OUT/cuprobe_$(basename "$f" .cu)${def:+_$def}.log"
      nvcc -O3 -std=c++20 -arch=sm_90a -Icuda ${def:+-D$def} "$f" -o /tmp/cuprobe >"$log" 2>&1 &&
        /tmp/cuprobe >>"$log" 2>&1
      note "cuprobe $spec rc=$?"; grep -E "^(OK|FAIL|BAD|TIME)" "$log" | head -40 ;;
    ffiprobe:*)  # a CUDA probe that includes ffi/ sources: the XLA FFI and DeepGEMM headers too
      f=${step#ffiprobe:}
      log="$OUT/ffiprobe_$(basename "$f" .cu).log"
      inc=$($PY -c "import jaxlib, os; print(os.path.join(os.path.dirname(jaxlib.__file__), 'include'))")
      nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
        -diag-suppress 940,2473 -Icuda -Iffi -I"$inc" -I/tmp/site/deep_gemm/include "$f" \
        -o /tmp/ffiprobe >"$log" 2>&1 && /tmp/ffiprobe >>"$log" 2>&1
      note "ffiprobe $f rc=$?"; grep -E "^(OK|FAIL|BAD|TIME)" "$log" | head -40 ;;
    probe:*)
      f=${step#probe:}
      $PY "$f" >"$OUT/probe_$(basename "$f").log" 2>&1
      note "probe $f rc=$?"; grep -E "^(OK|FAIL|BAD|TIME)" "$OUT/probe_$(basename "$f").log" | head -40 ;;
  esac
done
echo; echo "==== summary"; printf '%s\n' "${summary[@]}"
