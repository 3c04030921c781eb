"""Random inputs for the tests: caches on scattered pages, query bundles, adversarial scores."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj


def paged_cache(rng, batch, max_pages, page_size, head_dim, fmt="fp8", spare_pages=3):
    """A cache with every request's pages scattered over a shuffled pool (plus unused pages)."""
    num_pages = batch * max_pages + spare_pages
    perm = rng.permutation(num_pages).astype(np.int32)
    block_table = perm[: batch * max_pages].reshape(batch, max_pages)
    keys = rng.standard_normal((num_pages * page_size, head_dim)).astype(np.float32)
    keys *= rng.uniform(0.1, 4.0, (num_pages * page_size, 1)).astype(np.float32)
    cache = dj.PagedIndexCache.zeros(num_pages, page_size, head_dim, fmt)
    cache = dj.write_cache(
        cache, jnp.asarray(keys), jnp.arange(num_pages * page_size, dtype=jnp.int32)
    )
    return cache, jnp.asarray(block_table)


def query(rng, batch, next_n, heads, head_dim, fmt="fp8"):
    q = rng.standard_normal((batch, next_n, heads, head_dim)).astype(np.float32)
    w = rng.standard_normal((batch, next_n, heads)).astype(np.float32)
    return dj.quantize_queries(jnp.asarray(q), jnp.asarray(w), fmt)


def scores(rng, rows, n, kind="random"):
    """Score rows of a given flavour: random, few distinct values (ties), or with NaN/-inf/±0."""
    if kind == "random":
        return rng.standard_normal((rows, n)).astype(np.float32)
    if kind == "ties":
        return rng.integers(0, 4, (rows, n)).astype(np.float32)
    if kind == "equal":
        return np.full((rows, n), 1.5, np.float32)
    if kind == "special":
        s = rng.integers(-3, 3, (rows, n)).astype(np.float32)
        pick = rng.random((rows, n))
        s[pick < 0.15] = np.nan
        s[(pick >= 0.15) & (pick < 0.3)] = -np.inf
        s[(pick >= 0.3) & (pick < 0.35)] = np.inf
        s[(pick >= 0.35) & (pick < 0.45)] = -0.0
        return s
    raise ValueError(kind)


def small_config(**kw):
    """An IndexerConfig small enough for CPU tests (overrides by keyword)."""
    base = dict(
        num_heads=4,
        head_dim=64,
        index_topk=12,
        candidate_topk_blocks=6,
        candidate_block_size=4,
        page_size=16,
    )
    base.update(kw)
    return dj.IndexerConfig(**base)


POISON = 0x5A5A5A5A


def poison_device_memory(nbytes: int = 1 << 28) -> None:
    """Fill, then free, a large device buffer: an output the kernel forgets to write would likely
    read this pattern back (the allocator reuses freed blocks)."""
    jax.block_until_ready(jnp.full((nbytes // 4,), POISON, jnp.int32)).delete()


def dcp_step(mesh, cfg, *, interleave=1, exchange="auto", implementation=None):
    """A jitted DCP publish + select over mesh axis "x" (per-device caches and page tables
    stacked on axis 0), returning (top-k, blocks, count, valid_lens, consumer selection)."""
    from functools import partial

    from jax.sharding import PartitionSpec as P

    from dsv41_jax import sharding

    @jax.jit
    @partial(
        jax.shard_map,
        mesh=mesh,
        in_specs=(P(), P("x"), P("x"), P(), P()),
        out_specs=P(),
        check_vma=False,
    )
    def step(q, caches, tables, ctx, q2):
        local = dj.PagedIndexCache(caches[0])
        kw = dict(axis="x", interleave=interleave, implementation=implementation)
        idx, table = sharding.dcp_publish(q, local, tables[0], ctx, cfg, exchange=exchange, **kw)
        sel = sharding.dcp_select(q2, local, tables[0], ctx, table, cfg, **kw)
        return idx, table.blocks, table.count, table.valid_lens, sel

    return step


def assert_dcp_equal(got, want_idx, want_table, want_sel):
    idx, blocks, count, valid, sel = (np.asarray(x) for x in got)
    np.testing.assert_array_equal(idx, np.asarray(want_idx))
    np.testing.assert_array_equal(blocks, np.asarray(want_table.blocks))
    np.testing.assert_array_equal(count, np.asarray(want_table.count))
    np.testing.assert_array_equal(valid, np.asarray(want_table.valid_lens))
    np.testing.assert_array_equal(sel, np.asarray(want_sel))
