"""The filter-first select (or `--select cluster|short`) forced, by shape, on the extension in
PYTHONPATH: kernel time per call and whether it selects what the reference does, on normal
scores with lengths n - 3 (and rows ascending with position, where keys bunch in the last warps'
runs; masked rows of 2048 candidate blocks of 8).

    python scripts/probes/filter_select_ab.py TAG   # once per build, interleaved
    python scripts/probes/filter_select_ab.py TAG "[64, 128K]" --full    # some shapes, whole rows
    python scripts/probes/filter_select_ab.py TAG --rows 16:131072:512   # other shapes (rows:n:k)
    python scripts/probes/filter_select_ab.py TAG --select cluster --rows 16:131072:5000
    python scripts/probes/filter_select_ab.py TAG --no-split   # the filter's rows in clusters

Prints `TIME TAG what shape k us` and `SAME` / `DIFF` lines (`what` names the select when it is
not the filter, and "clusters" with --no-split)."""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import jax_time_us
from dsv41_jax.topk import ffi as topk_ffi

tag, args = sys.argv[1], sys.argv[2:]
select = "filter"
split = "--no-split" not in args
args = [a for a in args if a != "--no-split"]
if "--select" in args:
    at = args.index("--select")
    select, args = args[at + 1], args[:at] + args[at + 2 :]
extra = [a.split(":") for a in args[args.index("--rows") + 1 :]] if "--rows" in args else []
args = args[: args.index("--rows")] if extra else args
only = [a for a in args if a != "--full"]  # optional shape filters, e.g. "[64, 1024K]"
trim = 0 if "--full" in args else 3  # lengths n - 3, or whole rows
rng = np.random.default_rng(0)
CASES = [  # (kind, rows, n, k, dtype)
    ("normal", 1, 16384, 512, jnp.float32),
    ("normal", 8, 131072, 512, jnp.float32),
    ("normal", 8, 131072, 2048, jnp.float32),
    ("normal", 64, 131072, 512, jnp.float32),
    ("normal", 8, 1 << 20, 512, jnp.float32),
    ("normal", 64, 1 << 20, 512, jnp.float32),
    ("normal", 8, 1 << 20, 2048, jnp.bfloat16),
    ("ascending", 64, 131072, 512, jnp.float32),
    ("ascending", 8, 1 << 20, 512, jnp.float32),
    ("masked", 8, 131072, 512, jnp.float32),
    ("masked", 64, 131072, 512, jnp.float32),
]
if extra:  # --rows rows:n:k ...: normal f32 rows of those shapes instead
    CASES = [("normal", int(r), int(n), int(k), jnp.float32) for r, n, k in extra]
for kind, rows, n, k, dtype in CASES:
    shape = f"[{rows}, {n // 1024}K]"
    if only and shape not in only:
        continue
    lens = jnp.full((rows,), n - trim, jnp.int32)
    blocks = None
    if kind == "masked":
        blocks = jnp.asarray(
            np.sort(np.stack([rng.choice(n // 8, 2048, replace=False) for _ in range(rows)]), 1)
        ).astype(jnp.int32)

    def scores():
        s = inputs.normal(rng, (rows, n))
        return (jnp.sort(s, axis=1) if kind == "ascending" else s).astype(dtype)

    sets = [(scores(), lens) for _ in range(3)]

    def fn(s, ln, algorithm=select, blocks=blocks, k=k):
        return topk_ffi.cuda_topk(s, ln, k, None, blocks, 8, "positions", algorithm, split)

    got = np.asarray(jax.jit(fn)(*sets[0]))
    t = jax_time_us(fn, sets, calls=40)
    want = np.asarray(
        jax.jit(
            lambda s, ln: dj.topk(
                s, ln, k, candidates=blocks, block_size=8, implementation="reference"
            )
        )(*sets[0])
    )
    dt = ("" if select == "filter" else f"{select} ") + ("" if split else "clusters ")
    dt += "bf16 " if dtype == jnp.bfloat16 else ""
    print(f"TIME {tag} {dt}{kind} {shape} k={k} {t:.2f}", flush=True)
    print(f"{'SAME' if np.array_equal(got, want) else 'DIFF'} {tag} {dt}{kind} {shape} k={k}")
