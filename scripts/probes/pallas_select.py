"""Probe: the Pallas select (`implementation="pallas"`) against the CUDA selects ("ffi", the
dispatch's pick), lax.top_k and the reference, by shape: each result checked against the
reference (OK / BAD), then device time per call (kernel time by the profiler, median of
repeats over rotating inputs). Prints `TIME <op> <shape> pallas=… ffi=… lax=…` lines;
`--threads 512` adds "pallas512": the first of several launches in CTAs of 512 threads.

    python scripts/probes/pallas_select.py [quick] [--only SUBSTRING] [--threads 512]
    python scripts/probes/pallas_select.py --amax    # block_amax's kernels instead
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import jax_time_us
from dsv41_jax.topk import mgpu_select

K = 1024
CASES = [  # (op, rows, n, k, dtype)
    ("topk k=512", 1, 16 * K, 512, "f32"),
    ("topk k=512", 8, 16 * K, 512, "f32"),
    ("candidate top-2048", 8, 16 * K, 2048, "f32"),
    ("topk k=512", 8, 128 * K, 512, "f32"),
    ("masked topk k=512", 8, 128 * K, 512, "f32"),
    ("topk k=2048", 8, 128 * K, 2048, "f32"),
    ("topk k=512", 64, 16 * K, 512, "f32"),
    ("candidate top-2048", 64, 16 * K, 2048, "f32"),
    ("topk k=512", 64, 128 * K, 512, "f32"),
    ("masked topk k=512", 64, 128 * K, 512, "f32"),
    ("topk k=512", 8, 1024 * K, 512, "f32"),
    ("masked topk k=512", 8, 1024 * K, 512, "f32"),
    ("topk k=512", 64, 1024 * K, 512, "f32"),
    ("topk k=512 bf16", 8, 128 * K, 512, "bf16"),
    ("candidate top-2048", 8, 128 * K, 2048, "f32"),
    ("topk k=512 bf16", 8, 16 * K, 512, "bf16"),
    ("topk k=512 bf16", 64, 16 * K, 512, "bf16"),
    ("masked topk k=512", 64, 1024 * K, 512, "f32"),
]
AMAX = [(8, 128 * K), (64, 128 * K), (64, 1024 * K), (8, 1024 * K), (1, 16 * K)]


def amax(rng) -> None:
    """block_amax: the Pallas TMA kernel against the SIMT one (1, 2, 4 blocks a thread) and the
    XLA reference; floor = the scores read and the block maxima written at copy bandwidth."""
    from dsv41_jax.blocks import mgpu_amax
    from dsv41_jax.blocks import pallas_mgpu as amax_tma

    for rows, n in AMAX:
        sets = [
            (inputs.normal(rng, (rows, n)), jnp.full((rows,), n - 3, jnp.int32)) for _ in range(3)
        ]
        want = jax.jit(lambda s, lens: dj.block_amax(s, lens, implementation="reference"))(*sets[0])
        variants = {
            "reference": lambda s, lens: dj.block_amax(s, lens, implementation="reference"),
            "tma": lambda s, lens: amax_tma.block_amax(s, lens, 8, None, True),
        }
        for per in (1, 2, 4):
            spec = mgpu_amax.AmaxSpec(n, 8, per, True)
            variants[f"simt{per}"] = lambda s, lens, spec=spec: mgpu_amax.launch(spec, s, lens)
        times = {}
        for name, f in variants.items():
            try:
                got = jax.jit(f)(*sets[0])
                ok = np.array_equal(np.asarray(got), np.asarray(want))
                print(f"{'OK ' if ok else 'BAD'} block_amax [{rows}, {n // K}K] {name}", flush=True)
                times[name] = jax_time_us(f, sets)
            except Exception as e:  # noqa: BLE001 - a probe reports and goes on
                msg = " | ".join(str(e).strip().splitlines()[:3])[:400]
                print(f"FAIL block_amax [{rows}, {n // K}K] {name}: {msg}", flush=True)
        cells = " ".join(f"{name}={t:.1f}" for name, t in times.items())
        print(f"TIME block_amax [{rows}, {n // K}K] {cells}", flush=True)


def main() -> None:
    quick = "quick" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 0
    rng = np.random.default_rng(0)
    if "--amax" in sys.argv:
        amax(rng)
        return
    for op, rows, n, k, dtype in CASES:
        if only not in f"{op} [{rows}, {n // K}K]" or (quick and rows * n > 8 * 128 * K):
            continue
        shape = f"[{rows}, {n // K}K]"
        candidate, masked = op.startswith("candidate"), op.startswith("masked")
        length = n * 8 - 3 if candidate else n - 3
        sets = []
        for _ in range(3):
            s = inputs.normal(rng, (rows, n))
            if dtype == "bf16":
                s = s.astype(jnp.bfloat16)
            lens = jnp.asarray(rng.integers(length // 2, length + 1, rows).astype(np.int32))
            lens = lens.at[0].set(length)
            extra = ()
            if masked:
                blocks = np.sort(
                    np.stack([rng.choice(n // 8, 2048, replace=False) for _ in range(rows)]), 1
                )
                extra = (jnp.asarray(blocks.astype(np.int32)),)
            sets.append((s, lens, *extra))

        def fn(s, lens, blocks=None, impl=None):
            if impl == "pallas512":
                source = "blocks" if candidate else "bf16" if dtype == "bf16" else "f32"
                run = mgpu_select.launch
                return mgpu_select.select(run, source, s, lens, k, members=blocks, threads=512)
            if candidate:
                return dj.select_candidate_blocks(s, lens, num_candidates=k, implementation=impl)
            return dj.topk(s, lens, k, candidates=blocks, implementation=impl)

        times = {}
        want = jax.jit(lambda *a: fn(*a, impl="reference"))(*sets[0])
        for impl in ("pallas", "ffi") + (("pallas512",) if threads == 512 else ()):
            try:
                f = jax.jit(lambda *a, i=impl: fn(*a, impl=i))
                got = f(*sets[0])
                same = np.array_equal(np.asarray(got), np.asarray(want))
                bad = int((np.asarray(got) != np.asarray(want)).sum())
                print(f"{'OK ' if same else 'BAD'} {op} {shape} {impl} ({bad} differ)", flush=True)
                times[impl] = jax_time_us(lambda *a, i=impl: fn(*a, impl=i), sets)
            except Exception as e:  # noqa: BLE001 - a probe reports and goes on
                msg = " | ".join(str(e).strip().splitlines()[:3])[:400]
                print(f"FAIL {op} {shape} {impl}: {type(e).__name__}: {msg}", flush=True)
        if not candidate and not masked:
            times["lax"] = jax_time_us(lambda s, lens: jax.lax.top_k(s, k)[1], sets)
        cells = " ".join(f"{name}={t:.1f}" for name, t in times.items())
        ratio = times["pallas"] / times["ffi"] if {"pallas", "ffi"} <= times.keys() else 0
        print(f"TIME {op} {shape} {cells} pallas/ffi={ratio:.2f}", flush=True)


if __name__ == "__main__":
    main()
