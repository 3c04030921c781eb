#!/usr/bin/env bash
# The filter select's split rows on the device machine, in one call from the repository root:
# build, the GPU tests of the filter select (split rows and rows in clusters), then an A/B by
# shape of the filter select split (`split`), the filter select in clusters (`clus`) and the
# short-row select (`short`), each result checked against the reference, then memcheck and
# racecheck of the filter select's sanitizer section while time is left (LIMIT seconds in all).
#
#   bash scripts/probes/split_rows_check.sh          # carry .whl
#
# Prints the TIME lines (filter_select_ab.py: `TIME tag what shape k us`) and the SAME / DIFF
# counts; logs go to $OUT.
set -u
OUT=${OUT:-/tmp/dsv41_out}
mkdir -p "$OUT"
LIMIT=${LIMIT:-520}
scripts/device_check.sh build >"$OUT/build_check.txt" 2>&1
tail -2 "$OUT/build_check.txt"
export PYTHONPATH=$PWD/build/device:/tmp/site:$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
p=scripts/probes/filter_select_ab.py
S1="8:131072:512 8:131072:2048 1:131072:512 4:131072:512 16:131072:512 32:131072:512"
S1="$S1 1:32768:512 1:65536:512 8:65536:512 2:131072:2048"
S2="8:1048576:512 1:1048576:512 4:1048576:2048"
timeout 180 bash -c "
  python3 $p split --rows $S1; python3 $p clus --no-split --rows $S1
  python3 $p short --select short --rows $S1
  python3 $p split --rows $S2; python3 $p clus --no-split --rows $S2
" >"$OUT/ab.log" 2>&1
echo "A/B done at $SECONDS s"
PYTEST_K="filter or signed_zeros or denormal" timeout 200 scripts/device_check.sh \
  tests:tests/test_topk.py,tests/test_candidate_blocks.py,tests/test_edges.py 2>&1 | tail -25
echo "tests done at $SECONDS s"
left=$((LIMIT - SECONDS))
if [ $left -gt 60 ]; then
  SANITIZE_MEMCHECK=filter SANITIZE_SECTIONS=filter timeout $left \
    scripts/device_check.sh sanitize 2>&1 | tail -4
fi
echo "sanitizers done at $SECONDS s"
grep -E "^TIME" "$OUT/ab.log"
echo "SAME $(grep -c SAME "$OUT/ab.log"), DIFF $(grep -c DIFF "$OUT/ab.log")"
grep -E "DIFF|Error" "$OUT/ab.log" | head -10
