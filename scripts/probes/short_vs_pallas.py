"""Rows of one CTA: the CUDA short select against the Pallas select, by width, the figures
behind the plan's order (`dsv41_jax/plan/ops.py`, `_preferred_order`). Each shape is timed
through each implementation forced (kernel time per call by the profiler, normal scores,
lengths n - 3), in rounds interleaved, after its result is checked against the reference.

    python scripts/probes/short_vs_pallas.py [ROUNDS]

Prints `TIME op [rows, n] k=K impl us` per round, then `MEDIAN` lines."""

import statistics
import sys

import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import jax_time_us

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rng = np.random.default_rng(0)
CASES = [  # (op, rows, n, k)
    ("topk", 1, 2048, 64),
    ("topk", 8, 2048, 64),
    ("topk", 1, 4096, 512),
    ("topk", 8, 4096, 512),
    ("topk", 8, 8192, 512),
    ("topk", 1, 16384, 512),
    ("topk", 8, 16384, 512),
    ("topk", 64, 16384, 512),
    ("topk", 8, 16384, 2048),
    ("candidate", 8, 4096, 512),
    ("candidate", 8, 16384, 2048),
    ("candidate", 64, 16384, 2048),
]


def call(op, k, impl):
    if op == "candidate":
        return lambda s, n: dj.select_candidate_blocks(s, n, num_candidates=k, implementation=impl)
    return lambda s, n: dj.topk(s, n, k, implementation=impl)


times: dict[tuple, list[float]] = {}
for r in range(rounds):
    for op, rows, n, k in CASES:
        length = n * 8 - 3 if op == "candidate" else n - 3
        sets = [
            (inputs.normal(rng, (rows, n)), jnp.full((rows,), length, jnp.int32)) for _ in range(3)
        ]
        want = np.asarray(call(op, k, "reference")(*sets[0]))
        for impl in ("ffi", "pallas") if r % 2 == 0 else ("pallas", "ffi"):
            t = jax_time_us(call(op, k, impl), sets, calls=40, want=want, what=f"{op} {impl}")
            times.setdefault((op, rows, n, k, impl), []).append(t)
            print(f"TIME {op} [{rows}, {n}] k={k} {impl} {t:.2f}", flush=True)
for (op, rows, n, k, impl), ts in times.items():
    print(f"MEDIAN {op} [{rows}, {n}] k={k} {impl} {statistics.median(ts):.2f}")
