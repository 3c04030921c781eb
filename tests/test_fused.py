"""The fused Hopper layers (dsv41_jax/fused.py): one custom call a layer, bitwise the layer's ops
called one by one. Their two small kernels run on the CPU stand-in; the layers run on the GPU
against the op-by-op path (`fuse=False`) and against the reference select
over the same FFI logits."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import paged_cache, poison_device_memory, query

import dsv41_jax as dj

# ------------------------------------------------ the block kernels on the CPU stand-in


@pytest.mark.parametrize("block_size,pin", [(8, True), (8, False), (4, True), (1, True)])
def test_block_amax_kernel_on_the_stand_in(simt_topk, rng, block_size, pin):
    """Visible, non-NaN maxima per block; -inf for empty blocks and blocks past the row; the
    newest block +inf when pinned; lengths clamped to the row (cuda/smxx_block_ops)."""
    from selection import emulate_page_kernel

    rows, n, stride = 9, 100, 128
    scores = rng.integers(-3, 3, (rows, stride)).astype(np.float32)
    pick = rng.random((rows, stride))
    scores[pick < 0.2] = np.nan
    scores[(pick >= 0.2) & (pick < 0.3)] = -np.inf
    scores[(pick >= 0.3) & (pick < 0.33)] = np.inf
    scores[3, :16] = np.nan  # whole blocks of NaN: -inf
    scores[:, n:] = 1e9  # past the row: never read
    lens = np.array([0, 1, 7, 8, 9, 55, n, n + 30, -4], np.int32)
    nb = -(-n // block_size)
    got = emulate_page_kernel(
        simt_topk,
        "amax",
        (rows, stride, n, nb, block_size, pin),
        (scores, lens),
        np.float32,
        (rows, nb),
    )
    want = np.full((rows, nb), -np.inf, np.float32)
    for r in range(rows):
        length = min(max(int(lens[r]), 0), n)
        for b in range(nb):
            vals = scores[r, b * block_size : min((b + 1) * block_size, length)]
            vals = vals[~np.isnan(vals)]
            if vals.size:
                want[r, b] = vals.max()
        newest = -(-length // block_size) - 1
        if pin and newest >= 0:
            want[r, newest] = np.inf
    assert not np.isnan(got).any()
    np.testing.assert_array_equal(got, want)


def test_columns_to_positions_kernel_on_the_stand_in(simt_topk, rng):
    """Sparse column j -> blocks[j // B]·B + j % B; -1 and columns past the table stay -1."""
    from selection import emulate_page_kernel

    rows, k, c, b = 4, 50, 16, 8
    blocks = np.sort(rng.choice(10_000, (rows, c)), axis=1).astype(np.int32)
    columns = rng.integers(0, c * b, (rows, k)).astype(np.int32)
    columns[0, :4] = [-1, c * b, c * b + 1, 2**31 - 1]
    columns[1, -1] = c * b - 1
    got = emulate_page_kernel(
        simt_topk, "cols", (rows, k, c, b), (columns, blocks), np.int32, (rows, k)
    )
    ok = (columns >= 0) & (columns < c * b)
    safe = np.where(ok, columns, 0)
    want = np.where(ok, np.take_along_axis(blocks, safe // b, axis=1) * b + safe % b, -1)
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------ the fused layers on the GPU (device machine)


def _config(heads=32, next_n=1):
    return dj.IndexerConfig(num_heads=heads, index_topk=64, candidate_topk_blocks=32, next_n=next_n)


def _inputs(rng, cfg, pages, batch=12, bad_pages=False):
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    q = query(rng, batch, cfg.next_n, cfg.num_heads, 128)
    capacity = pages * 64
    edges = [0, 1, 7, 8, 9, 255, 256, 257, capacity - 1, capacity]
    lens = np.minimum(edges + rng.integers(0, capacity + 1, batch).tolist(), capacity)[:batch]
    bt = np.asarray(bt).copy()
    if bad_pages:  # page ids outside the cache: their positions are NaN, never selected
        for row, col, page in ((2, 0, -1), (9, -1, cache.num_pages + 5), (10, 1, 2**31 - 1)):
            if row < batch:
                bt[row, col] = page
    return q, cache, jnp.asarray(np.array(lens, np.int32)), jnp.asarray(bt)


def _both(make, *args):
    """`make(fuse)(*args)` jitted with the fused layers (`fuse=True`) and op by op (False):
    (fused, unfused) as numpy."""
    poison_device_memory()
    got = jax.tree.map(np.asarray, jax.jit(make(True))(*args))
    want = jax.tree.map(np.asarray, jax.jit(make(False))(*args))
    return got, want


def _assert_same(got, want):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.gpu
@pytest.mark.parametrize("heads,next_n", [(32, 1), (64, 2)])
# Every block a candidate (no block scores); the top-C, its table written by the short select
# (the pages cover the logits' blocks); the top-C and the sort (41 pages: the logits are wider);
# rows of 19200 positions (the top-k's block scores written by a cluster of two).
@pytest.mark.parametrize("pages", [4, 40, 41, 300])
def test_fused_publish_equals_its_ops(rng, heads, next_n, pages):
    cfg = _config(heads, next_n)
    q, cache, lens, bt = _inputs(rng, cfg, pages, bad_pages=True)
    got, want = _both(lambda fuse: lambda *a: dj.publish(*a, cfg, fuse=fuse), q, cache, lens, bt)
    _assert_same(got, want)
    # The top-k is the contract's over the same FFI logits.
    logits = dj.paged_mqa_logits(q, cache, lens, bt, implementation="ffi")
    rows = dj.row_lengths(lens, next_n)
    ref = dj.topk(logits, rows, cfg.index_topk, implementation="reference")
    np.testing.assert_array_equal(got[0], np.asarray(ref))


@pytest.mark.gpu
@pytest.mark.parametrize("heads,next_n", [(32, 1), (64, 2)])
@pytest.mark.parametrize("path", ["sparse", "mask", "auto"])
def test_fused_select_equals_its_ops(rng, heads, next_n, path):
    cfg = _config(heads, next_n)
    q, cache, lens, bt = _inputs(rng, cfg, 40, bad_pages=True)
    _, table = dj.publish(q, cache, lens, bt, cfg)
    make = lambda fuse: lambda *a: dj.select(*a, cfg, path=path, fuse=fuse)  # noqa: E731
    got, want = _both(make, q, cache, lens, bt, table)
    np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
def test_fused_plain_layer_equals_its_ops(rng):
    cfg = _config()
    q, cache, lens, bt = _inputs(rng, cfg, 40, bad_pages=True)
    make = lambda fuse: lambda *a: dj.select_plain(*a, cfg, fuse=fuse)  # noqa: E731
    got, want = _both(make, q, cache, lens, bt)
    np.testing.assert_array_equal(got, want)
    logits = dj.paged_mqa_logits(q, cache, lens, bt, implementation="ffi")
    ref = dj.topk(logits, lens, cfg.index_topk, implementation="reference")
    np.testing.assert_array_equal(got, np.asarray(ref))


@pytest.mark.gpu
@pytest.mark.parametrize("pages,path", [(4, "auto"), (40, "auto"), (40, "mask")])
def test_fused_decode_step_equals_its_ops(rng, pages, path):
    cfg = _config()
    layers = (20, 24, 28, 1)
    layout = dict(source_layer=20, consumer_layers=(24, 28), plain_layers=(1,), path=path)
    caches, queries = {}, {}
    q, cache, lens, bt = _inputs(rng, cfg, pages, bad_pages=True)
    for layer in layers:
        caches[layer], _ = paged_cache(rng, 12, pages, 64, 128)
        queries[layer] = query(rng, 12, 1, 32, 128)

    def make(fuse):
        ix = dj.make_two_level_indexer(cfg, **layout, fuse=fuse)
        return lambda *a: ix.decode(*a, physical=True)

    got, want = _both(make, queries, caches, lens, bt)
    _assert_same(got, want)


@pytest.mark.gpu
def test_fused_layers_split_long_rows(rng):
    """Few rows past the short select's reach: the plan splits each over CTAs without a cluster
    (`dsv41_jax.plan.split_rows`), and the fused publish, plain layer and decode step, given the
    split rows' workspace, select bitwise what the ops do and the contract's top-k says."""
    from dsv41_jax.plan import Spec, device_record, split_rows

    cfg = _config()
    pages, batch = 2050, 2  # 131200 positions a row: past the short select's 131072
    capacity = pages * 64
    q = query(rng, batch, 1, cfg.num_heads, 128)
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    lens = jnp.array([capacity, capacity - 4999], jnp.int32)
    width = dj.paged_mqa_logits(q, cache, lens, bt, implementation="ffi").shape[1]
    assert split_rows(Spec("topk", batch, width, "float32", cfg.index_topk), device_record())
    got, want = _both(lambda fuse: lambda *a: dj.publish(*a, cfg, fuse=fuse), q, cache, lens, bt)
    _assert_same(got, want)
    logits = dj.paged_mqa_logits(q, cache, lens, bt, implementation="ffi")
    ref = np.asarray(dj.topk(logits, lens, cfg.index_topk, implementation="reference"))
    np.testing.assert_array_equal(got[0], ref)
    make = lambda fuse: lambda *a: dj.select_plain(*a, cfg, fuse=fuse)  # noqa: E731
    got, want = _both(make, q, cache, lens, bt)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, ref)
    layers = (20, 24, 1)
    queries = {layer: query(rng, batch, 1, cfg.num_heads, 128) for layer in layers}
    caches = {layer: paged_cache(rng, batch, pages, 64, 128)[0] for layer in layers}
    ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=(24,), plain_layers=(1,))
    step = lambda ix, *a: ix.decode(*a, physical=True)  # noqa: E731
    poison_device_memory()
    want = _run(ix, False, step, queries, caches, lens, bt)
    _assert_same(_run(ix, True, step, queries, caches, lens, bt), want)


# ------------------------------------------------ the decode step, one call a layer


def _ops(ix):
    """`ix` running op by op."""
    return dataclasses.replace(ix, fuse=False)


def _step_inputs(rng, cfg, pages, layers, batch=12):
    q, cache, lens, bt = _inputs(rng, cfg, pages, batch, bad_pages=True)
    caches, queries = {}, {}
    for layer in layers:
        caches[layer], _ = paged_cache(rng, batch, pages, 64, 128)
        queries[layer] = query(rng, batch, cfg.next_n, cfg.num_heads, 128)
    return queries, caches, lens, bt


def _run(ix, fuse, method, *args):
    """`method(ix with fuse, *args)` jitted, as numpy (e.g. method
    `dj.TwoLevelIndexer.decode_stacked`)."""
    ix = dataclasses.replace(ix, fuse=fuse)
    return jax.tree.map(np.asarray, jax.jit(method)(ix, *args))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "pages,path,heads,next_n,batch",
    [
        (4, "auto", 32, 1, 4),
        (4, "auto", 32, 1, 12),
        (40, "auto", 32, 1, 12),
        (40, "mask", 32, 1, 12),
        (40, "auto", 64, 2, 12),
    ],
)
def test_decode_step_equals_its_ops(rng, pages, path, heads, next_n, batch):
    """Dense (every block a candidate, under 8 query rows), sparse (over the step's own
    every-block table from 8 rows, and over the top-C blocks) and mask consumers and a plain
    layer, next_n 1 and 2, bad page ids: the layers one call each, bitwise the ops one by
    one."""
    cfg = _config(heads, next_n)
    layers = (20, 24, 28, 1)
    ix = dj.make_two_level_indexer(
        cfg, source_layer=20, consumer_layers=(24, 28), plain_layers=(1,), path=path
    )
    args = _step_inputs(rng, cfg, pages, layers, batch)
    step = lambda ix, *a: ix.decode(*a, physical=True)  # noqa: E731
    poison_device_memory()
    _assert_same(_run(ix, True, step, *args), _run(ix, False, step, *args))


@pytest.mark.gpu
def test_decode_step_follows_new_data_and_new_buffers(rng):
    """Called again with new data (new lengths, queries, caches), with every other call's
    outputs kept alive (new buffers for XLA's command buffers), and beside a step of other
    shapes and attributes: each call selects what the ops do."""
    cfg = _config()
    ix = dj.make_two_level_indexer(cfg, source_layer=20, consumer_layers=(24, 28))
    small = dj.IndexerConfig(num_heads=32, index_topk=16, candidate_topk_blocks=32)
    ix_small = dj.make_two_level_indexer(small, source_layer=20, consumer_layers=(24, 28))
    step = jax.jit(lambda *a: ix.decode(*a))
    step_small = jax.jit(lambda *a: ix_small.decode(*a))
    ops = jax.jit(lambda *a: _ops(ix).decode(*a))
    ops_small = jax.jit(lambda *a: _ops(ix_small).decode(*a))
    kept = []
    for i in range(6):
        args = _step_inputs(rng, cfg, 40, (20, 24, 28))
        for _ in range(2):
            got = step(*args)
            if i % 2:
                kept.append(got)
            _assert_same(jax.tree.map(np.asarray, got), jax.tree.map(np.asarray, ops(*args)))
        _assert_same(
            jax.tree.map(np.asarray, step_small(*args)),
            jax.tree.map(np.asarray, ops_small(*args)),
        )
    assert len(kept) == 6


@pytest.mark.gpu
@pytest.mark.parametrize("pages,path", [(4, "auto"), (40, "auto"), (40, "mask")])
def test_decode_stacked_is_the_step_selections_stacked(rng, pages, path):
    """One [layers, rows, k] array in `ix.layers` order (a plain layer sorts first): the step's
    selections stacked, bitwise, fused or op by op."""
    cfg = _config()
    ix = dj.make_two_level_indexer(
        cfg, source_layer=20, consumer_layers=(24, 28), plain_layers=(1,), path=path
    )
    args = _step_inputs(rng, cfg, pages, ix.layers)
    poison_device_memory()
    want = _run(ix, False, lambda ix, *a: ix.decode(*a).selections, *args)
    for fuse in (True, False):
        got = _run(ix, fuse, dj.TwoLevelIndexer.decode_stacked, *args)
        np.testing.assert_array_equal(got, np.stack([want[layer] for layer in ix.layers]))
