#!/usr/bin/env bash
# Registers, stack and spills of the project's own kernels (cuda/*.cu) as ptxas reports them for
# sm_90a, side by side for a git revision and the working tree: a CPU check of a kernel change
# before its device A/B (a new spill is a reason to look; equal usage is no proof of speed).
#
#   scripts/ptxas_usage.sh 96184b2                 # every kernel file
#   scripts/ptxas_usage.sh 96184b2 smxx_filter_topk.cu
set -euo pipefail
rev=${1:?usage: scripts/ptxas_usage.sh REV [FILE.cu ...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mapfile -t files < <(cd cuda && ls ./*.cu | sed 's#^\./##')
fi
old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
git archive "$rev" cuda | tar -x -C "$old"

usage() {  # dir file -> "kernel<args>: registers, stack, spills" lines
  nvcc -I"$1" -O3 -DNDEBUG -std=c++20 --expt-relaxed-constexpr --expt-extended-lambda \
    -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -c "$1/$2" -o "$old/out.o" 2>&1 |
    grep -E "Compiling entry|registers|spill" | sed -E 's/ptxas info *: //' | paste - - - |
    sed -E "s/.*entry function '([^']*)' for 'sm_90a'\t *([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads\tUsed ([0-9]+) registers.*/\1 : \5 regs, stack \2, spills \3\/\4/" |
    c++filt | sed -E 's/^void //; s/dsv41::(\(anonymous namespace\)::)?//g; s/topk:://g; s/\(TopkArgs, long\)//'
}

for f in "${files[@]}"; do
  echo "== $f ($rev | working tree)"
  paste -d'|' <(usage "$old/cuda" "$f") <(usage "$root/cuda" "$f") |
    awk -F'|' '{ split($2, b, " : "); mark = ($1 == $2) ? "  " : "* "; print mark $1 "  |  " b[2] }'
done
