"""The candidate blocks' helpers: `sort_candidate_blocks` and `block_amax`, beside torch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import inputs
from benchmarks.table import Row
from benchmarks.timing import Timer


def bench_sort(timer: Timer, rng, bw) -> list[Row]:
    import torch

    import dsv41_jax as dj

    rows = []
    for bs in (8, 64):
        c, pages = 2048, 2048  # 128K positions = 16384 blocks
        sets = []
        for _ in range(4):
            sel = np.stack([rng.choice(16384, c, replace=False) for _ in range(bs)]).astype(
                np.int32
            )
            sets.append(
                (
                    jnp.asarray(sel),
                    jnp.full((bs,), 131072, jnp.int32),
                    jnp.asarray(rng.integers(0, 1 << 20, (bs, pages), dtype=np.int32)),
                )
            )
        floor = bs * c * 4 * 3 / (bw * 1e3)  # read ids, write blocks + physical
        reference = jax.jit(lambda *a: dj.sort_candidate_blocks(*a, implementation="reference"))
        want = reference(*sets[0])
        for impl in ("ffi", "reference"):
            t = timer.jax_us(
                lambda *a, impl=impl: dj.sort_candidate_blocks(*a, implementation=impl),
                sets,
                want=want,
                what=f"sort_candidate_blocks [{bs}, {c}] {impl}",
            )
            rows.append(Row("sort_candidate_blocks", f"[{bs}, {c}]", impl, t, floor))
        tsel = [torch.from_numpy(np.asarray(s[0])).cuda() for s in sets]
        t = timer.kernel_us(lambda i: torch.sort(tsel[i % 4], dim=1).values)
        rows.append(Row("sort_candidate_blocks", f"[{bs}, {c}]", "torch.sort (baseline)", t, floor))
    return rows


def bench_block_amax(timer: Timer, rng, bw) -> list[Row]:
    import torch

    import dsv41_jax as dj

    rows = []
    for bs, n in ((8, 131072), (64, 131072), (64, 1 << 20)):
        sets = [(inputs.normal(rng, (bs, n)), jnp.full((bs,), n - 5, jnp.int32)) for _ in range(2)]
        floor = bs * n * 4 * (1 + 1 / 8) / (bw * 1e3)
        want = jax.jit(lambda s, l: dj.block_amax(s, l, implementation="reference"))(*sets[0])
        for impl in ("pallas", "reference"):
            t = timer.jax_us(
                lambda s, l, impl=impl: dj.block_amax(s, l, implementation=impl),
                sets,
                want=want,
                what=f"block_amax [{bs}, {n // 1024}K] {impl}",
            )
            rows.append(Row("block_amax", f"[{bs}, {n // 1024}K]", impl, t, floor))
        ts = [torch.from_numpy(np.asarray(s[0])).cuda() for s in sets]
        t = timer.kernel_us(lambda i: ts[i % 2].view(bs, -1, 8).amax(-1))
        rows.append(Row("block_amax", f"[{bs}, {n // 1024}K]", "torch amax (baseline)", t, floor))
    return rows
