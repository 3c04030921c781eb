#!/usr/bin/env bash
# Builds record_probe.so here (the PTX embedded as a header), for record_probe.py.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-python3}
INC=$($PY -c "import jax.ffi; print(jax.ffi.include_dir())")
OUTDIR=${1:-.}
mkdir -p "$OUTDIR"
nvcc -ptx -arch=sm_90a -x cu probe_kernel.cuh -o "$OUTDIR/probe_add_one.ptx"
{ printf 'static const char kProbeAddOnePtx[] = R"PTX('; cat "$OUTDIR/probe_add_one.ptx"; printf ')PTX";\n'; } >"$OUTDIR/probe_add_one.ptx.h"
nvcc -O2 -std=c++17 -arch=sm_90a -Xcompiler -fPIC -shared -I"$INC" -I"$OUTDIR" record_probe.cu \
  -o "$OUTDIR/record_probe.so"
echo "built $OUTDIR/record_probe.so"
