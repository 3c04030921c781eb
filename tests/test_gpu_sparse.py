"""The Hopper sparse consumer on the GPU: sparse logits bitwise equal to the dense FFI logits at
every published position, and select(path="sparse") equal to select(path="mask") exactly."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import paged_cache, poison_device_memory, query
from selection import onchip_reference

import dsv41_jax as dj
from dsv41_jax import fused
from dsv41_jax.logits import ffi as logits_ffi
from dsv41_jax.plan import device_record, sparse_select

pytestmark = pytest.mark.gpu


def config(heads, next_n, c=32, k=64):
    return dj.IndexerConfig(num_heads=heads, index_topk=k, candidate_topk_blocks=c, next_n=next_n)


def lengths(rng, batch, capacity, c):
    """Edges first (0, 1, 7, 8, 9, C·B - 1, C·B, C·B + 1, capacity), then random."""
    edges = [0, 1, 7, 8, 9, c * 8 - 1, c * 8, c * 8 + 1, capacity]
    rand = rng.integers(0, capacity + 1, max(batch - len(edges), 0)).tolist()
    return np.minimum(np.array((edges + rand)[:batch], np.int32), capacity)


def dense_at_table(dense, table, b=8):
    """Dense logits gathered at the sparse row's positions (columns past valid_lens masked)."""
    blocks = np.asarray(table.blocks)
    valid = np.asarray(table.valid_lens)
    cols = np.arange(blocks.shape[1] * b)
    pos = np.where(blocks[:, cols // b] == dj.INT32_MAX, 0, blocks[:, cols // b]) * b + cols % b
    vis = cols[None] < valid[:, None]
    return np.take_along_axis(dense, np.where(vis, pos, 0), axis=1), vis


@pytest.mark.parametrize("heads,next_n", [(32, 1), (64, 1), (32, 2), (64, 2)])
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_sparse_logits_bitwise_equal_dense(rng, heads, next_n, kind):
    batch, pages, c = 12, 40, 32
    cfg = config(heads, next_n, c)
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    if kind == "ties":  # few distinct keys: many exactly equal logits
        cache = dj.PagedIndexCache(jnp.asarray(np.asarray(cache.data)[:, :1].repeat(64, axis=1)))
    q = query(rng, batch, next_n, heads, 128)
    ctx = jnp.asarray(lengths(rng, batch, pages * 64, c))
    _, table = dj.publish(q, cache, ctx, bt, cfg)
    poison_device_memory()
    sparse = np.asarray(
        dj.sparse_paged_mqa_logits(q, cache, table, ctx, bt, block_size=8, implementation="ffi")
    )
    dense = np.asarray(dj.paged_mqa_logits(q, cache, ctx, bt, implementation="ffi"))
    want, vis = dense_at_table(dense, table)
    assert sparse.dtype == np.float32 and sparse.shape == (batch * next_n, c * 8)
    np.testing.assert_array_equal(sparse.view(np.uint32)[vis], want.view(np.uint32)[vis])


@pytest.mark.parametrize("heads,next_n,c", [(32, 1, 40), (64, 1, 32), (32, 2, 8), (64, 2, 264)])
def test_sparse_logits_on_any_slots_bitwise_dense(rng, heads, next_n, c):
    """The kernel on `physical` slots of every kind (the table passed as is): repeated, far,
    unordered, padding (-1, NaN) and past the cache (NaN), with valid lengths at every tile
    edge and outside [0, C·8]. Against the dense FFI logits of an identity page table, a slot's
    8 columns are bitwise the dense logits of its 8 tokens; every column of a tile that starts
    below the row's length is written (outputs poisoned first)."""
    batch, pages = 6, 40
    cache, _ = paged_cache(rng, 1, pages - 3, 64, 128)  # `pages` pages in all (3 spare)
    assert cache.num_pages == pages
    q = query(rng, batch, next_n, heads, 128)
    rows, slots = batch * next_n, pages * 8
    # Every row sees every page (one page more, so next_n rows all reach the last token).
    bt = jnp.tile(jnp.arange(pages + 1, dtype=jnp.int32) % pages, (batch, 1))
    ctx = jnp.full((batch,), (pages + 1) * 64, jnp.int32)
    physical = rng.integers(0, slots, (rows, c)).astype(np.int32)
    physical[0, :] = physical[0, 0]  # one slot, repeated
    physical[1, ::3] = -1  # padding
    physical[2, 1::4] = rng.integers(slots, slots + 50, physical[2, 1::4].shape)  # past the cache
    physical[3, :] = np.arange(c)[::-1] * 7 % slots  # unordered, far apart
    edges = [0, 1, 7, 8, 9, 63, 64, 65, c * 8 - 1, c * 8, c * 8 + 1, -3, 2**31 - 1]
    valid = np.array([edges[i % len(edges)] for i in range(rows)], np.int32)
    valid[:4], valid[4] = c * 8, 0  # the rows of special slots in full; an empty row
    zeros = jnp.zeros((rows, c), jnp.int32)
    table = dj.CandidateTable(
        zeros, jnp.zeros(rows, jnp.int32), jnp.asarray(valid), jnp.asarray(physical), block_size=8
    )
    poison_device_memory()
    got = np.asarray(logits_ffi.sparse_paged_mqa_logits_sm90(q, cache, table, 8))
    dense = np.asarray(dj.paged_mqa_logits(q, cache, ctx, bt, implementation="ffi"))
    cols = np.arange(c * 8)
    slot = physical[:, cols // 8]
    ok = (slot >= 0) & (slot < slots)
    pos = np.where(ok, slot // 8 * 64 + slot % 8 * 8 + cols % 8, 0)
    want = np.where(ok, np.take_along_axis(dense, pos, axis=1), np.nan).astype(np.float32)
    tiles = -(-np.clip(valid, 0, c * 8) // 64)
    written = cols[None] < tiles[:, None] * 64
    assert written[:4].all() and not written[4].any()
    g, w = got[written], want[written]
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    fin = ~np.isnan(w)
    np.testing.assert_array_equal(g[fin].view(np.uint32), w[fin].view(np.uint32))


def test_sparse_logits_invalid_pages_are_nan(rng):
    batch, pages, c = 4, 40, 32
    cfg = config(32, 1, c)
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    q = query(rng, batch, 1, 32, 128)
    ctx = jnp.full((batch,), pages * 64, jnp.int32)
    bad = np.asarray(bt).copy()
    bad[0, :] = -1  # every page of row 0 invalid: physical -1
    bad[1, :] = cache.num_pages + 5  # row 1: page ids past the cache
    _, bad_table = dj.publish(q, cache, ctx, jnp.asarray(bt), cfg)
    bad_table = dj.sort_candidate_blocks(
        jnp.where(bad_table.blocks == dj.INT32_MAX, -1, bad_table.blocks),
        ctx,
        jnp.asarray(bad),
        implementation="reference",
    )
    got = np.asarray(
        dj.sparse_paged_mqa_logits(q, cache, bad_table, ctx, jnp.asarray(bad), block_size=8)
    )
    valid = np.asarray(bad_table.valid_lens)
    assert np.isnan(got[0, : valid[0]]).all() and np.isnan(got[1, : valid[1]]).all()
    assert np.isfinite(got[2, : valid[2]]).all()


@pytest.mark.parametrize("heads,next_n", [(32, 1), (64, 1), (32, 2), (64, 2)])
def test_select_sparse_equals_mask(rng, heads, next_n):
    batch, pages, c = 16, 48, 32
    cfg = config(heads, next_n, c)
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    cache2, _ = paged_cache(rng, batch, pages, 64, 128)
    q, q2 = query(rng, batch, next_n, heads, 128), query(rng, batch, next_n, heads, 128)
    ctx = jnp.asarray(lengths(rng, batch, pages * 64, c))
    _, table = dj.publish(q, cache, ctx, bt, cfg)
    poison_device_memory()
    f = jax.jit(lambda *a, path: dj.select(*a, cfg, path=path), static_argnames="path")
    sparse = np.asarray(f(q2, cache2, ctx, bt, table, path="sparse"))
    auto = np.asarray(f(q2, cache2, ctx, bt, table, path="auto"))
    mask = np.asarray(f(q2, cache2, ctx, bt, table, path="mask"))
    np.testing.assert_array_equal(sparse, mask)
    np.testing.assert_array_equal(auto, mask)


def test_more_than_1024_sparse_rows_equal_mask(rng):
    """1,400 query rows (700 requests x next_n 2), past the 1,024 rows the sparse path once
    took, inside the sparse kernel's grid (`sm90_sparse_max_rows`). Both consumer forms (logits
    then select, and on chip) equal the mask path, and "auto" takes the sparse one; the logits
    are bitwise the dense logits at the published positions."""
    batch, next_n, pages, c = 700, 2, 4, 8
    cfg = config(32, next_n, c, k=16)
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    q = query(rng, batch, next_n, 32, 128)
    ctx = jnp.asarray(lengths(rng, batch, pages * 64, c))
    _, table = dj.publish(q, cache, ctx, bt, cfg)
    assert device_record().limit("sm90_sparse_max_rows") >= batch * next_n
    poison_device_memory()
    sparse_logits = np.asarray(
        dj.sparse_paged_mqa_logits(q, cache, table, ctx, bt, block_size=8, implementation="ffi")
    )
    want, vis = dense_at_table(np.asarray(dj.paged_mqa_logits(q, cache, ctx, bt)), table)
    np.testing.assert_array_equal(sparse_logits.view(np.uint32)[vis], want.view(np.uint32)[vis])
    mask = np.asarray(dj.select(q, cache, ctx, bt, table, cfg, path="mask"))
    for algorithm in ("onchip", "short"):
        got = dj.select(q, cache, ctx, bt, table, cfg, path="sparse", topk_algorithm=algorithm)
        np.testing.assert_array_equal(np.asarray(got), mask, err_msg=algorithm)
    choices = dj.info.explain(lambda *a: dj.select(*a, cfg), q, cache, ctx, bt, table)
    assert [c.implementation for c in choices if c.op == "select: consumer path"] == ["sparse"]


def test_select_at_v41_shape_sparse_equals_mask(rng):
    """V4.1's defaults (k 512, C 2048, B 8) at bs 4 × 64K and one short row."""
    cfg = dj.IndexerConfig()
    batch, pages = 4, 1024
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    cache2, _ = paged_cache(rng, batch, pages, 64, 128)
    q, q2 = query(rng, batch, 1, 32, 128), query(rng, batch, 1, 32, 128)
    ctx = jnp.array([pages * 64, pages * 64 - 3, 16385, 1000], jnp.int32)
    _, table = dj.publish(q, cache, ctx, bt, cfg)
    mask = np.asarray(dj.select(q2, cache2, ctx, bt, table, cfg, path="mask"))
    sparse = np.asarray(dj.select(q2, cache2, ctx, bt, table, cfg, path="sparse"))
    np.testing.assert_array_equal(sparse, mask)


def test_sparse_path_is_repeatable_and_captured_equal(rng):
    cfg = config(32, 1, 32)
    cache, bt = paged_cache(rng, 8, 32, 64, 128)
    q = query(rng, 8, 1, 32, 128)
    ctx = jnp.asarray(lengths(rng, 8, 32 * 64, 32))
    _, table = dj.publish(q, cache, ctx, bt, cfg)
    f = jax.jit(lambda *a: dj.select(*a, cfg, path="sparse"))
    first = np.asarray(f(q, cache, ctx, bt, table))
    for _ in range(10):
        np.testing.assert_array_equal(np.asarray(f(q, cache, ctx, bt, table)), first)


def test_block_size_mismatch_raises_on_gpu(rng):
    cfg = config(32, 1, 32)
    cache, bt = paged_cache(rng, 2, 8, 64, 128)
    q = query(rng, 2, 1, 32, 128)
    ctx = jnp.array([300, 500], jnp.int32)
    _, table = dj.publish(q, cache, ctx, bt, cfg)
    with pytest.raises(ValueError, match="block_size 8"):
        dj.select(q, cache, ctx, bt, table, dataclasses.replace(cfg, candidate_block_size=16))


def hand_made_blocks(rng, rows, c, nb):
    """Block ids of every kind a hand-made table may hold: in the row, repeated, unordered,
    negative, past the row, padding, and ids that wrap int32 when multiplied into positions."""
    pool = np.array([-(2**31), -1, nb, nb + 7, 2**30, dj.INT32_MAX], np.int64)
    blocks = np.where(
        rng.random((rows, c)) < 0.7, rng.integers(0, nb, (rows, c)), rng.choice(pool, (rows, c))
    )
    blocks[0] = np.where(np.arange(c) < c // 2, 3, dj.INT32_MAX)  # one block, repeated
    return blocks.astype(np.int32)


@pytest.mark.parametrize("heads,next_n", [(32, 1), (64, 2)])
def test_hand_made_tables_sparse_and_auto_equal_mask(rng, heads, next_n):
    """Issue 30 case 4 on the kernels: a table with junk count / valid_lens / physical and
    blocks of every kind; the sparse path (its kernel reads the rebuilt `physical`) and auto
    select what the mask path does, under jit, and nothing outside the table's blocks."""
    batch, pages, c = 8, 48, 32
    cfg = config(heads, next_n, c)
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    q = query(rng, batch, next_n, heads, 128)
    ctx = jnp.asarray(lengths(rng, batch, pages * 64, c))
    rows = batch * next_n
    blocks = hand_made_blocks(rng, rows, c, pages * 8)
    table = dj.CandidateTable(
        jnp.asarray(blocks),
        jnp.full((rows,), 5, jnp.int32),
        jnp.full((rows,), 77, jnp.int32),
        jnp.full((rows, c), 9, jnp.int32),
        block_size=8,
    )
    poison_device_memory()
    f = jax.jit(lambda *a, path: dj.select(*a, cfg, path=path), static_argnames="path")
    mask = np.asarray(f(q, cache, ctx, bt, table, path="mask"))
    for path in ("sparse", "auto"):
        np.testing.assert_array_equal(np.asarray(f(q, cache, ctx, bt, table, path=path)), mask)
    row_lens = np.asarray(dj.row_lengths(ctx, next_n))
    for r in range(rows):
        chosen = mask[r][mask[r] >= 0]
        assert (chosen < row_lens[r]).all()
        assert set((chosen // 8).tolist()) <= set(blocks[r].tolist())


def test_traced_lengths_past_capacity_on_the_kernels(rng):
    """Issue 30 case 2 on the kernels: jit(publish) and the step with lengths past the page
    table publish and select what the clamped lengths give (the newest block pinned)."""
    batch, pages, c = 4, 48, 32
    cfg = config(32, 2, c)
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    q, q2 = query(rng, batch, 2, 32, 128), query(rng, batch, 2, 32, 128)
    cap = pages * 64
    ix = dj.make_two_level_indexer(cfg, source_layer=0, consumer_layers=(1,), path="sparse")

    def step(ctx):
        return ix.decode({0: q, 1: q2}, {0: cache, 1: cache}, ctx, bt, physical=True)

    want = step(jnp.array([100, cap, cap, cap], jnp.int32))
    got = jax.jit(step)(jnp.array([100, cap + 1, 9999, 2**31 - 1], jnp.int32))
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    newest = (cap - 1) // 8
    assert (np.asarray(got.table.blocks)[2:] == newest).any(axis=1).all()


@pytest.mark.parametrize(
    "heads,next_n,batch,c,k",
    [
        (32, 1, 1, 2048, 512),
        (64, 1, 8, 2048, 512),
        (32, 2, 8, 2048, 512),
        (64, 1, 64, 2048, 512),
        (32, 1, 150, 264, 64),
        (64, 2, 5, 40, 512),
        (32, 1, 3, 8, 1),
    ],
)
def test_onchip_select_on_any_slots_equals_reference(rng, heads, next_n, batch, c, k):
    """The one-kernel sparse select on a table passed as is (slots repeated, padding -1, past
    the cache, blocks of any value; lengths at the edges of tiles, of the cluster's chunks and
    outside [0, C·8]; many exactly tied logits): the exact top-k of the sparse logits kernel's
    own logits, and what the logits-then-select path gives. Outputs poisoned first."""
    pages = 40
    cache, _ = paged_cache(rng, 1, pages - 3, 64, 128)
    data = np.array(cache.data)
    data[: pages // 2 * 2 : 2] = data[
        1 : pages // 2 * 2 : 2
    ]  # pages in pairs: whole blocks of tied logits
    cache = dj.PagedIndexCache(jnp.asarray(data))
    q = query(rng, batch, next_n, heads, 128)
    rows, slots, cols = batch * next_n, pages * 8, c * 8
    physical = rng.integers(0, slots, (rows, c)).astype(np.int32)
    physical[0, ::5] = -1  # padding: NaN logits, never selected
    if rows > 1:
        physical[1, 1::4] = rng.integers(slots, slots + 50, physical[1, 1::4].shape)
    if rows > 2:
        physical[2, :] = physical[2, 0]  # one slot, repeated: 8 distinct logits a row
    edges = [cols, 0, 1, 7, 8, 9, k - 1, k, k + 1, 63, 64, 65, 1023, 1024, 1025, 2049, 8191]
    edges += [cols - 1, cols + 1, -3, 2**31 - 1]
    valid = np.array([edges[i % len(edges)] for i in range(rows)], np.int64)
    valid[rows // 2 :] = rng.integers(0, cols + 1, rows - rows // 2)
    valid = np.clip(valid, -3, 2**31 - 1).astype(np.int32)
    blocks = rng.integers(-(2**20), 2**20, (rows, c)).astype(np.int32)
    table = dj.CandidateTable(
        jnp.asarray(blocks),
        jnp.zeros(rows, jnp.int32),
        jnp.asarray(valid),
        jnp.asarray(physical),
        block_size=8,
    )
    shared = fused.SparseShared.of(table)
    logits = np.asarray(logits_ffi.sparse_paged_mqa_logits_sm90(q, cache, table, 8))
    want = onchip_reference(logits, np.clip(valid, 0, cols), k, blocks)
    device = device_record()
    poison_device_memory()
    assert sparse_select(cols, k, 8, rows, device, "onchip")[0] == "onchip"
    got = np.asarray(fused.sparse_select(q, cache, table, shared, k, "onchip"))
    np.testing.assert_array_equal(got, want)
    assert sparse_select(cols, k, 8, rows, device, "short")[0] == "short"  # logits, then select
    two_pass = np.asarray(fused.sparse_select(q, cache, table, shared, k, "short"))
    np.testing.assert_array_equal(two_pass, want)
    default = np.asarray(
        fused.sparse_select(q, cache, table, shared, k, sparse_select(cols, k, 8, rows, device)[0])
    )
    np.testing.assert_array_equal(default, want)


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_onchip_select_at_v41_shape_equals_logits_then_select(rng, batch):
    """V4.1's defaults (k 512, C 2048) through the public select and the one-call step: the
    one-kernel select (forced) equals the default sparse path (logits-then-select below 32 rows,
    the one kernel from there) and the mask path."""
    cfg = dj.IndexerConfig()
    pages = 300
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    cache2, _ = paged_cache(rng, batch, pages, 64, 128)
    q, q2 = query(rng, batch, 1, 32, 128), query(rng, batch, 1, 32, 128)
    ctx = jnp.asarray(np.minimum(lengths(rng, batch, pages * 64, 2048), pages * 64))
    _, table = dj.publish(q, cache, ctx, bt, cfg)
    f = jax.jit(lambda *a, path: dj.select(*a, cfg, path=path), static_argnames="path")
    poison_device_memory()
    sparse = np.asarray(f(q2, cache2, ctx, bt, table, path="sparse"))
    mask = np.asarray(f(q2, cache2, ctx, bt, table, path="mask"))
    onchip = np.asarray(
        jax.jit(lambda *a: dj.select(*a, cfg, path="sparse", topk_algorithm="onchip"))(
            q2, cache2, ctx, bt, table
        )
    )
    ix = dj.make_two_level_indexer(
        cfg, source_layer=0, consumer_layers=(1,), path="sparse", topk_algorithm="onchip"
    )
    step = jax.jit(lambda *a: ix.decode(*a))({0: q, 1: q2}, {0: cache, 1: cache2}, ctx, bt)
    np.testing.assert_array_equal(sparse, mask)
    np.testing.assert_array_equal(onchip, mask)
    want = ix.decode({0: q, 1: q2}, {0: cache, 1: cache2}, ctx, bt)
    for g, w in zip(jax.tree.leaves(step), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
