"""The decode logits: `paged_mqa_logits`, the FFI kernel beside the reference."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from dsv41_jax import testing
from dsv41_jax.bench.table import Row
from dsv41_jax.bench.timing import Timer


def bench_logits(timer: Timer, rng, bw, quick: bool) -> list[Row]:
    import dsv41_jax as dj

    rows = []
    for bs in (1, 8, 64):
        for ctx in (16384, 131072):
            pages = ctx // 64
            sets = []
            for _ in range(2):
                cache = dj.PagedIndexCache(
                    jnp.asarray(rng.integers(0, 120, (bs * pages, 64, 1, 132), dtype=np.uint8))
                )
                bt = jnp.asarray(rng.permutation(bs * pages).astype(np.int32).reshape(bs, pages))
                q = testing.query(rng, bs, 1, 32, 128)
                sets.append((q, cache, jnp.full((bs,), ctx, jnp.int32), bt))
            floor = bs * ctx * 132 / (bw * 1e3)
            t = timer.jax_us(lambda *a: dj.paged_mqa_logits(*a, implementation="ffi"), sets)
            rows.append(
                Row("paged_mqa_logits", f"bs{bs} x {ctx // 1024}K", "ffi (DeepGEMM sm90)", t, floor)
            )
            if not quick and bs * ctx <= 8 * 131072:
                t = timer.jax_us(
                    lambda *a: dj.paged_mqa_logits(*a, implementation="reference"), sets, calls=3
                )
                rows.append(
                    Row("paged_mqa_logits", f"bs{bs} x {ctx // 1024}K", "reference (XLA)", t, floor)
                )
    return rows
