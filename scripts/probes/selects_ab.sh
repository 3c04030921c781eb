#!/usr/bin/env bash
# The CUDA selects of two or more prebuilt extensions, interleaved: for each tag in order (e.g.
# base new new base), the filter-first select at the wave-boundary row counts and its default
# shapes, the short-row select, and the cluster select at k = 5000, each timed and checked
# against the reference. Run on the device machine from the repository root, the builds carried
# in .prebuilt/<tag>/:
#
#   scripts/probes/selects_ab.sh base new new base
#   PARTS=filter scripts/probes/selects_ab.sh base new new base   # the filter's default shapes only
#
# PARTS names what each round runs, any of: filter_rows filter short cluster (default: all).
# Writes every probe's log to $OUT and prints the TIME lines sorted by shape, then the counts
# of SAME and DIFF lines.
set -u
OUT=${OUT:-/tmp/dsv41_out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
ALL="filter_rows filter short cluster"
PARTS=${PARTS:-$ALL}
for part in $PARTS; do
  case " $ALL " in
    *" $part "*) ;;
    *) echo "selects_ab.sh: unknown part '$part' in PARTS (any of: $ALL)" >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name --format=csv,noheader
i=0
for T in "$@"; do
  i=$((i + 1))
  export PYTHONPATH=$PWD/.prebuilt/$T:/tmp/site:$PWD
  p=scripts/probes
  for part in $PARTS; do
    case $part in
      filter_rows) python3 $p/filter_select_ab.py "$T" --rows 16:131072:512 32:131072:512 \
        20:131072:512 64:131072:512 100:131072:512 8:1048576:512 ;;
      filter) python3 $p/filter_select_ab.py "$T" ;;
      short) python3 $p/short_select_ab.py "$T" ;;
      cluster) python3 $p/filter_select_ab.py "$T" --select cluster \
        --rows 4:131072:5000 16:131072:5000 64:131072:5000 ;;
    esac >"$OUT/${i}_${T}_${part}.log" 2>&1
  done
  echo "round $i ($T) done at $SECONDS s"
done
cat "$OUT"/*.log | grep "^TIME" | sort -s -k3
echo "SAME $(cat "$OUT"/*.log | grep -c SAME), DIFF $(cat "$OUT"/*.log | grep -c DIFF)"
