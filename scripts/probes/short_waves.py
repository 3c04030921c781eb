"""Rows over clusters: the CUDA short select against the filter select, at row counts around the
clusters that run at once, the figures behind the plan's rule (`dsv41_jax/plan/ops.py`,
`_policy`: the short select where the rows' clusters run at once, or in two waves for clusters
of 4 or more CTAs). Each shape is timed
through each select forced (`topk_algorithm=`; kernel time per call by the profiler, normal
scores, lengths n - 3), in rounds interleaved, after its result is checked against the
reference.

    python scripts/probes/short_waves.py [ROUNDS [WIDTH ...]]   # only rows of those widths

Prints the clusters that run at once, `TIME [rows, n] k=K select us` per round, then `MEDIAN`
lines."""

import statistics
import sys

import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import jax_time_us
from dsv41_jax import _ext

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rng = np.random.default_rng(0)
_ext.register_ffi_targets()
at_once = {c: _ext.short_topk_max_clusters(c) for c in (2, 4, 8)}
print(f"OK clusters at once by cluster size: {at_once}", flush=True)
CASES = [(rows, 131072, 512) for rows in (8, 12, 16, 24, 32)]
CASES += [(rows, 65536, 512) for rows in (16, 32, 48)]
CASES += [(rows, 32768, 512) for rows in (66, 100, 132, 140)]
CASES += [(16, 131072, 2048)]
if len(sys.argv) > 2:
    CASES = [c for c in CASES if str(c[1]) in sys.argv[2:]]


def call(k, select):
    return lambda s, n: dj.topk(s, n, k, implementation="ffi", topk_algorithm=select)


times: dict[tuple, list[float]] = {}
for r in range(rounds):
    for rows, n, k in CASES:
        sets = [(inputs.normal(rng, (rows, n)), jnp.full((rows,), n - 3, jnp.int32))]
        sets += [(inputs.normal(rng, (rows, n)), sets[0][1]) for _ in range(2)]
        want = np.asarray(dj.topk(*sets[0], k, implementation="reference"))
        for select in ("short", "filter") if r % 2 == 0 else ("filter", "short"):
            t = jax_time_us(call(k, select), sets, calls=40, want=want, what=f"topk {select}")
            times.setdefault((rows, n, k, select), []).append(t)
            print(f"TIME [{rows}, {n}] k={k} {select} {t:.2f}", flush=True)
for (rows, n, k, select), ts in times.items():
    print(f"MEDIAN [{rows}, {n}] k={k} {select} {statistics.median(ts):.2f}")
