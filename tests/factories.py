"""Test-only helpers; the random inputs themselves come from `benchmarks.inputs` (shared with the
benchmark) and are re-exported here."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from benchmarks.inputs import packed_keys, paged_cache, query, scores  # noqa: F401


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


# Scores at and around +-0 (denormals, +0 and -0, NaN, -inf), with odds that put the filter
# select's bars there: "zeros" (k = 512 over chunks of about 15K) puts the sampled bar on the key
# of +0 and -0 and the k-th key on a denormal; "zeros-cut" (k = 4096) fills the buffer, whose
# cuts put the k-th key on +-0 or a denormal and the bar just above it.
DMIN = np.float32(1e-45)  # the least positive float (a denormal)
SIGNED_ZEROS = np.array([2.0, 2 * DMIN, DMIN, 0.0, -0.0, -DMIN, -1.0, np.nan, -np.inf], np.float32)
SIGNED_ZERO_ODDS = {
    "zeros": [0.03, 0.03, 0.05, 0.15, 0.15, 0.10, 0.45, 0.02, 0.02],
    "zeros-cut": [0.10, 0.10, 0.10, 0.15, 0.15, 0.10, 0.26, 0.02, 0.02],
}


def signed_zero_scores(rng, shape, kind: str) -> np.ndarray:
    """float32 scores of `shape` drawn from SIGNED_ZEROS with SIGNED_ZERO_ODDS[kind]."""
    return rng.choice(SIGNED_ZEROS, shape, p=SIGNED_ZERO_ODDS[kind])


POISON = 0x5A5A5A5A


def dcp_body(mesh, args: int = 5):
    """A decorator: a DCP body `f(query, caches, tables, context_lens, ...)` of `args`
    arguments as a shard_map over mesh axis "x", the per-device caches and page tables stacked
    on axis 0 (split), the other arguments and the outputs replicated."""
    from jax.sharding import PartitionSpec as P

    specs = (P(), P("x"), P("x")) + (P(),) * (args - 3)
    return partial(jax.shard_map, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False)


def rank_body(mesh, args: int):
    """A decorator: a body of `args` arguments as a shard_map over mesh axis "x" with every
    argument and output split on axis 0 (each rank's own rows: PCP)."""
    from jax.sharding import PartitionSpec as P

    specs = (P("x"),) * args
    return partial(jax.shard_map, mesh=mesh, in_specs=specs, out_specs=P("x"), check_vma=False)


def poison_device_memory(nbytes: int = 1 << 28) -> None:
    """Fill, then free, a large device buffer: an output the kernel forgets to write would likely
    read this pattern back (the allocator reuses freed blocks)."""
    jax.block_until_ready(jnp.full((nbytes // 4,), POISON, jnp.int32)).delete()


def dcp_step(
    mesh,
    cfg,
    *,
    interleave=1,
    exchange="auto",
    implementation=None,
    path="auto",
    topk_algorithm=None,
):
    """A jitted DCP publish + select over mesh axis "x" (per-device caches and page tables
    stacked on axis 0), returning (top-k, blocks, count, valid_lens, consumer selection)."""
    from dsv41_jax import sharding

    @jax.jit
    @dcp_body(mesh)
    def step(q, caches, tables, ctx, q2):
        local = dj.PagedIndexCache(caches[0])
        kw = dict(
            axis="x",
            interleave=interleave,
            implementation=implementation,
            topk_algorithm=topk_algorithm,
        )
        idx, table = sharding.dcp_publish(q, local, tables[0], ctx, cfg, exchange=exchange, **kw)
        sel = sharding.dcp_select(q2, local, tables[0], ctx, table, cfg, path=path, **kw)
        return idx, table.blocks, table.count, table.valid_lens, sel

    return step


def assert_dcp_equal(got, want_idx, want_table, want_sel):
    idx, blocks, count, valid, sel = (np.asarray(x) for x in got)
    np.testing.assert_array_equal(idx, np.asarray(want_idx))
    np.testing.assert_array_equal(blocks, np.asarray(want_table.blocks))
    np.testing.assert_array_equal(count, np.asarray(want_table.count))
    np.testing.assert_array_equal(valid, np.asarray(want_table.valid_lens))
    np.testing.assert_array_equal(sel, np.asarray(want_sel))


def calc_diff(x, y) -> float:
    """DeepGEMM's similarity measure of two logit arrays: 1 - 2·Σxy / Σ(x² + y²)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(1 - 2 * (x * y).sum() / max((x * x + y * y).sum(), 1e-30))


def visible_mask(lens_rows, cols: int) -> np.ndarray:
    """bool [rows, cols]: the columns below each row's length."""
    return np.arange(cols)[None] < np.asarray(lens_rows)[:, None]
