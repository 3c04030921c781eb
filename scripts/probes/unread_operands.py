"""The selects' unread operands: zeros of [rows] and [rows, 1] made inside the program (a fill
kernel a call) against the literal placeholders `cuda_topk` passes (none). Each shape through
`dsv41_jax.topk(implementation="ffi")` and through the same custom call given filled zeros,
kernel time per call by the profiler (every kernel of the program), rounds interleaved, each
result checked against the reference; the last round's kernels listed.

    python scripts/probes/unread_operands.py [ROUNDS]

Prints `TIME`, `KERNELS` and `MEDIAN` lines."""

import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import jax_time_us
from dsv41_jax import _ext
from dsv41_jax.topk.ffi import SHORT_TOPK

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rng = np.random.default_rng(0)
CASES = [(1, 16384, 512), (8, 16384, 512), (64, 16384, 512), (8, 4096, 512)]  # (rows, n, k)


def filled(k):
    def fn(s, n):
        rows = s.shape[0]
        out = jax.ShapeDtypeStruct((rows, k), jnp.int32)
        return jax.ffi.ffi_call(SHORT_TOPK, [out], vmap_method="sequential")(
            s,
            n,
            jnp.zeros((rows,), jnp.int32),
            jnp.zeros((rows, 1), jnp.int32),
            k=np.int32(k),
            block_size=np.int32(8),
            mode=np.int32(_ext.limit("topk_mode_positions")),
            has_starts=False,
            has_members=False,
        )[0]

    return fn


times: dict[tuple, list[float]] = {}
for r in range(rounds):
    for rows, n, k in CASES:
        sets = [
            (inputs.normal(rng, (rows, n)), jnp.full((rows,), n - 3, jnp.int32)) for _ in range(3)
        ]
        want = np.asarray(dj.topk(*sets[0], k, implementation="reference"))
        forms = {
            "literal": lambda s, m, k=k: dj.topk(
                s, m, k, implementation="ffi", topk_algorithm="short"
            ),
            "filled": filled(k),
        }
        for name in forms if r % 2 == 0 else reversed(list(forms)):
            kernels: list[str] = []
            t = jax_time_us(forms[name], sets, calls=40, want=want, what=name, breakdown=kernels)
            times.setdefault((rows, n, k, name), []).append(t)
            print(f"TIME [{rows}, {n}] k={k} {name} {t:.2f}", flush=True)
            if r == rounds - 1:
                print(f"KERNELS [{rows}, {n}] k={k} {name}: {kernels[0]}")
for (rows, n, k, name), ts in times.items():
    print(f"MEDIAN [{rows}, {n}] k={k} {name} {statistics.median(ts):.2f}")
