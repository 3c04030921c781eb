#!/usr/bin/env bash
# Download the wheels an offline GPU machine needs into .whl/ (run where pip reaches PyPI).
# sgl-deep-gemm ships DeepGEMM's header-only kernels: the CUDA build reads them, nothing imports
# them. The device check (scripts/device_check.sh) installs .whl/*.whl with --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
mkdir -p .whl
for spec in "sgl-deep-gemm==0.2.5"; do
  echo "fetch_wheels: $spec (CPython 3.12, manylinux x86_64)"
  $PY -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$spec"
done
ls -l .whl
