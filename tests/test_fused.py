"""The fused Hopper layers (dsv41_jax/fused.py): one custom call a layer, bitwise the layer's ops
called one by one. Their two small kernels run on the CPU stand-in; the layers run on the GPU
against the op-by-op path (`fused.unfused()`) and against the reference select over the same
FFI logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import paged_cache, poison_device_memory, query

import dsv41_jax as dj
from dsv41_jax import fused

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
        bt[2, 0], bt[9, -1], bt[10, 1] = -1, cache.num_pages + 5, 2**31 - 1
    return q, cache, jnp.asarray(np.array(lens, np.int32)), jnp.asarray(bt)


def _both(fn, *args):
    """`fn(*args)` jitted with the fused layers and op by op: (fused, unfused) as numpy."""
    poison_device_memory()
    got = jax.tree.map(np.asarray, jax.jit(fn)(*args))
    with fused.unfused():
        want = jax.tree.map(np.asarray, jax.jit(fn)(*args))
    return got, want


def _assert_same(got, want):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.gpu
@pytest.mark.parametrize("heads,next_n", [(32, 1), (64, 2)])
@pytest.mark.parametrize("pages", [4, 40])  # every block a candidate (no block scores) / top-C
def test_fused_publish_equals_its_ops(rng, heads, next_n, pages):
    cfg = _config(heads, next_n)
    q, cache, lens, bt = _inputs(rng, cfg, pages, bad_pages=True)
    got, want = _both(lambda *a: dj.publish(*a, cfg), q, cache, lens, bt)
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
    got, want = _both(lambda *a: dj.select(*a, cfg, path=path), q, cache, lens, bt, table)
    np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
def test_fused_plain_layer_equals_its_ops(rng):
    cfg = _config()
    q, cache, lens, bt = _inputs(rng, cfg, 40, bad_pages=True)
    got, want = _both(lambda *a: dj.select_plain(*a, cfg), q, cache, lens, bt)
    np.testing.assert_array_equal(got, want)
    logits = dj.paged_mqa_logits(q, cache, lens, bt, implementation="ffi")
    ref = dj.topk(logits, lens, cfg.index_topk, implementation="reference")
    np.testing.assert_array_equal(got, np.asarray(ref))


@pytest.mark.gpu
@pytest.mark.parametrize("pages,path", [(4, "auto"), (40, "auto"), (40, "mask")])
def test_fused_decode_step_equals_its_ops(rng, pages, path):
    cfg = _config()
    layers = (20, 24, 28, 1)
    ix = dj.make_two_level_indexer(
        cfg, source_layer=20, consumer_layers=(24, 28), plain_layers=(1,), path=path
    )
    caches, queries = {}, {}
    q, cache, lens, bt = _inputs(rng, cfg, pages, bad_pages=True)
    for layer in layers:
        caches[layer], _ = paged_cache(rng, 12, pages, 64, 128)
        queries[layer] = query(rng, 12, 1, 32, 128)
    got, want = _both(lambda *a: ix.decode(*a, physical=True), queries, caches, lens, bt)
    _assert_same(got, want)
