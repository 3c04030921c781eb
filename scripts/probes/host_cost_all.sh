#!/usr/bin/env bash
# host_cost.py under several XLA_FLAGS settings, interleaved (one process per setting and round),
# then one --vlog run (command-buffer updates per call) and one --trace run (host µs per thunk).
# Variants: HOST_COST_FLAGS, '|'-separated (an empty entry = XLA's defaults). Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/dsv41_out}
P=scripts/probes/host_cost.py
# The FFI Record API probe first (a small library of its own; built here unless carried).
R=scripts/probes/ffi_record
if [ -z "${HOST_COST_SKIP_RECORD:-}" ]; then
  RD=${RECORD_PROBE_DIR:-/tmp/record_probe}
  [ -f "$RD/record_probe.so" ] || bash $R/build.sh "$RD" >"$OUT/record_build.log" 2>&1 || tail -5 "$OUT/record_build.log"
  TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=custom_call_thunk=5,record_ffi=5 python3 $R/record_probe.py "$RD" \
    2>"$OUT/record_probe.err" | tee "$OUT/record_probe.log" | grep -E '^(OK|FAIL|TIME)'
  grep -m5 -i -E "record|fallback" "$OUT/record_probe.err" | cut -c1-300
fi
IFS='|' read -r -a variants <<< "${HOST_COST_FLAGS:-|--xla_gpu_enable_command_buffer=}"
for round in ${HOST_COST_ROUNDS:-1 2}; do
  for flags in "${variants[@]}"; do
    XLA_FLAGS="$flags" python3 $P --rounds 2 ${HOST_COST_ARGS:-} 2>>"$OUT/host_cost.err" |
      tee -a "$OUT/host_cost.log" | grep '^ROW'
  done
done
if [ -z "${HOST_COST_SKIP_VLOG:-}" ]; then
  IFS='|' read -r -a vflags <<< "${HOST_COST_VLOG_FLAGS:-}"
  i=0
  for flags in "${vflags[@]:-}"; do
    i=$((i + 1))
    XLA_FLAGS="$flags" TF_CPP_MIN_LOG_LEVEL=0 \
      TF_CPP_VMODULE=command_buffer_thunk=3,command_executor=3,command_buffer_conversion_pass=3 \
      python3 $P --vlog --rows micro,step ${HOST_COST_VLOG_ARGS:-} 2>"$OUT/host_cost_vlog$i.err" >/dev/null
    echo "VLOG flags: ${flags:-defaults}"
    python3 $P --parse-vlog "$OUT/host_cost_vlog$i.err"
  done
fi
if [ -n "${HOST_COST_TRACE:-}" ]; then
  python3 $P --trace --rows step --shapes 1x16384 2>>"$OUT/host_cost.err" | grep '^TRACE' | head -60
fi
