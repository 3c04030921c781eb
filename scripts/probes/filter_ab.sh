#!/usr/bin/env bash
# The filter select's kernels, build against build, on the device machine from the repository
# root: topk_phases.cu (the production kernels with phase stamps) built once per variant, for
# the split rows (PROBE_SPLIT) and the rows in clusters (PROBE_FILTER), then every binary run
# REPEATS times, interleaved. A variant is `name:include_dir[:MACRO=value,...]`: the kernels of
# include_dir (e.g. a copy of another commit's cuda/, `git archive HEAD cuda | tar -x -C base`).
# Prints `<name> <probe> TIME ...` lines (event-timed µs per launch over 20 back-to-back
# launches, then the phase ends).
#
#   VARIANTS="base:base/cuda new:cuda other:other/cuda" \
#     REPEATS=2 bash scripts/probes/filter_ab.sh
#   PROBES=PROBE_SHORT VARIANTS="base:base/cuda new:cuda" \
#     bash scripts/probes/filter_ab.sh   # the short-row select instead
set -u
VARIANTS=${VARIANTS:-new:cuda}
REPEATS=${REPEATS:-2}
PROBES=${PROBES:-PROBE_SPLIT PROBE_FILTER}
dir=$(mktemp -d)
for v in $VARIANTS; do
  IFS=: read -r name inc defs <<<"$v"
  flags=()
  for d in ${defs//,/ }; do flags+=("-D$d"); done
  for probe in $PROBES; do
    nvcc -O3 -std=c++20 -arch=sm_90a -I"$inc" -D$probe "${flags[@]}" \
      scripts/probes/topk_phases.cu -o "$dir/${name}_$probe" &
  done
done
wait
for r in $(seq "$REPEATS"); do
  for v in $VARIANTS; do
    name=${v%%:*}
    for probe in $PROBES; do
      "$dir/${name}_$probe" | sed "s/^/$name $probe /"
    done
  done
done
