"""The short-row select forced, by shape, on the extension in PYTHONPATH: kernel time per call
and whether it selects what the reference does (top-k of positions, the candidate blocks' top-C,
the mask path's top-k among 2048 candidate blocks), on normal scores with lengths n - 3.

    python scripts/probes/short_select_ab.py TAG   # once per build, interleaved

Prints `TIME TAG op shape us` and `SAME` / `DIFF` lines."""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import jax_time_us
from dsv41_jax.topk import ffi as topk_ffi

tag = sys.argv[1]
rng = np.random.default_rng(0)
CASES = [  # (op, rows, n, k)
    ("topk", 1, 16384, 512),
    ("topk", 8, 16384, 512),
    ("topk", 8, 32768, 512),
    ("topk", 8, 65536, 512),
    ("topk", 8, 131072, 512),
    ("topk", 8, 131072, 2048),
    ("topk", 64, 16384, 512),
    ("candidate", 8, 16384, 2048),
    ("candidate", 64, 16384, 2048),
    ("masked", 8, 131072, 512),
]
for op, rows, n, k in CASES:
    length = n * 8 - 3 if op == "candidate" else n - 3
    lens = jnp.full((rows,), length, jnp.int32)
    blocks = None
    if op == "masked":
        blocks = jnp.asarray(
            np.sort(np.stack([rng.choice(n // 8, 2048, replace=False) for _ in range(rows)]), 1)
        ).astype(jnp.int32)
    sets = [(inputs.normal(rng, (rows, n)), lens) for _ in range(3)]

    def fn(s, ln, impl=None, forced=None, op=op, k=k, blocks=blocks):
        if op == "candidate":
            return dj.select_candidate_blocks(
                s, ln, num_candidates=k, implementation=impl, topk_algorithm=forced
            )
        if op == "masked":
            return topk_ffi.cuda_topk(s, ln, k, None, blocks, 8, "positions", "short")
        return dj.topk(s, ln, k, implementation=impl, topk_algorithm=forced)

    got = np.asarray(jax.jit(lambda s, ln: fn(s, ln, "ffi", "short"))(*sets[0]))
    t = jax_time_us(lambda s, ln: fn(s, ln, "ffi", "short"), sets, calls=40)
    if op == "masked":
        want = np.asarray(
            jax.jit(
                lambda s, ln: topk_ffi.cuda_topk(s, ln, k, None, blocks, 8, "positions", "filter")
            )(*sets[0])
        )
    else:
        want = np.asarray(jax.jit(lambda s, ln: fn(s, ln, "reference"))(*sets[0]))
    print(f"TIME {tag} {op} [{rows}, {n // 1024}K] k={k} {t:.2f}", flush=True)
    print(f"{'SAME' if np.array_equal(got, want) else 'DIFF'} {tag} {op} [{rows}, {n // 1024}K]")
