"""The decode logits: `paged_mqa_logits`, the FFI kernel beside the reference, checked against
it first (DeepGEMM's similarity, as the tests: both score every visible position)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import inputs
from benchmarks.table import Row
from benchmarks.timing import Timer

SIMILAR = 5e-6  # the FFI logits against the XLA reference's (the bound of tests/test_logits.py)


def _cache(rng, pages: int):
    """A random fp8 cache of `pages` 64-token pages: value bytes 0..119 (finite e4m3) and
    scales in [2^-8, 1), so every logit is finite and the check compares them all."""
    values = rng.integers(0, 120, (pages, 64 * 128), dtype=np.uint8)
    scales = rng.uniform(2.0**-8, 1.0, (pages, 64)).astype(np.float32).view(np.uint8)
    return np.concatenate([values, scales], axis=1).reshape(pages, 64, 1, 132)


def bench_logits(timer: Timer, rng, bw, quick: bool) -> list[Row]:
    import dsv41_jax as dj

    rows = []
    for bs in (1, 8, 64):
        for ctx in (16384, 131072):
            pages = ctx // 64
            sets = []
            for _ in range(2):
                cache = dj.PagedIndexCache(jnp.asarray(_cache(rng, bs * pages)))
                bt = jnp.asarray(rng.permutation(bs * pages).astype(np.int32).reshape(bs, pages))
                q = inputs.query(rng, bs, 1, 32, 128)
                sets.append((q, cache, jnp.full((bs,), ctx, jnp.int32), bt))
            floor = bs * ctx * 132 / (bw * 1e3)
            reference = jax.jit(lambda *a: dj.paged_mqa_logits(*a, implementation="reference"))
            t = timer.jax_us(
                lambda *a: dj.paged_mqa_logits(*a, implementation="ffi"),
                sets,
                want=reference(*sets[0]),
                what=f"paged_mqa_logits bs{bs} x {ctx // 1024}K ffi",
                similar=SIMILAR,
            )
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
