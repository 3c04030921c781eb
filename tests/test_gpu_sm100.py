"""DeepGEMM's SM100 paged MQA logits (sparse and dense): run only where an SM100 (Blackwell) GPU is
present.

CI builds the kernels for sm_100a and tests/test_ext.py checks their FFI calls lower; where they
have run: docs/status.md ("sm100 ..."). On an SM100 machine these run as they are.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import calc_diff, paged_cache, query

import dsv41_jax as dj

pytestmark = pytest.mark.sm100


@pytest.mark.parametrize("next_n,page", [(1, 64), (2, 64), (1, 128)])
def test_sm100_sparse_logits_match_reference(rng, next_n, page):
    cfg = dj.IndexerConfig(cache_format="mxfp4", page_size=page, next_n=next_n)
    batch, pages = 4, 40000 // page
    cache, bt = paged_cache(rng, batch, pages, page, 128, "mxfp4")
    q = query(rng, batch, next_n, 32, 128, "mxfp4")
    lens = jnp.array([9, 16384, 20000, 39000], jnp.int32)
    _, table = dj.publish(q, cache, lens, bt, cfg)
    got = dj.sparse_paged_mqa_logits(q, cache, table, lens, bt, block_size=8, implementation="ffi")
    want = dj.sparse_paged_mqa_logits(
        q, cache, table, lens, bt, block_size=8, implementation="reference"
    )
    assert got.dtype == jnp.bfloat16
    valid = np.asarray(table.valid_lens)
    vis = np.arange(got.shape[1])[None] < valid[:, None]
    assert calc_diff(np.asarray(got.astype(jnp.float32))[vis], np.asarray(want)[vis]) < 1e-3


def test_sm100_sparse_path_selects_like_the_mask_path(rng):
    cfg = dj.IndexerConfig(cache_format="mxfp4")
    cache, bt = paged_cache(rng, 2, 600, 64, 128, "mxfp4")
    q = query(rng, 2, 1, 32, 128, "mxfp4")
    lens = jnp.array([20000, 38000], jnp.int32)
    _, table = dj.publish(q, cache, lens, bt, cfg)
    sparse = jax.jit(lambda *a: dj.select(*a, cfg, path="sparse"))(q, cache, lens, bt, table)
    mask = dj.select(q, cache, lens, bt, table, cfg, path="mask")
    overlap = np.mean(
        [
            len(set(np.asarray(sparse[r]).tolist()) & set(np.asarray(mask[r]).tolist()))
            / cfg.index_topk
            for r in range(2)
        ]
    )
    assert overlap > 0.95  # bf16 logits: differences only among near-ties of the k-th score


@pytest.mark.parametrize("next_n,page", [(1, 64), (2, 64), (1, 128)])
def test_sm100_dense_logits_match_reference(rng, next_n, page):
    batch, pages = 5, 3000 // page
    cache, bt = paged_cache(rng, batch, pages, page, 128, "mxfp4")
    bt = jnp.asarray(bt).at[1, 2].set(-1)  # an invalid page id: NaN at its visible positions
    q = query(rng, batch, next_n, 32, 128, "mxfp4")
    lens = jnp.array([0, 1, 383, 385, pages * page], jnp.int32)
    got = np.asarray(dj.paged_mqa_logits(q, cache, lens, bt, implementation="ffi"))
    want = np.asarray(dj.paged_mqa_logits(q, cache, lens, bt, implementation="reference"))
    rows = np.asarray(dj.row_lengths(lens, next_n))
    vis = np.arange(got.shape[1])[None] < rows[:, None]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got[vis]), np.isnan(want[vis]))
    ok = vis & ~np.isnan(want)
    assert calc_diff(got[ok], want[ok]) < 1e-3  # bf16 weights and reduction inside the kernel


def test_sm100_ragged_logits_match_reference(rng):
    t = 1001
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((t, 128)), jnp.float32), "mxfp4")
    s = np.array([0, 0, 7, t - 1, 0, t, 5, 3], np.int32)
    e = np.array([0, 1, 7, t, t, t, 260, 40], np.int32)
    q = query(rng, len(s), 1, 32, 128, "mxfp4")
    args = (q, keys, jnp.asarray(s), jnp.asarray(e))
    got = np.asarray(
        jax.jit(lambda *a: dj.mqa_logits(*a, relative=True, implementation="ffi"))(*args)
    )
    want = np.asarray(dj.mqa_logits(*args, relative=True, implementation="reference"))
    cs = np.clip(s, 0, t)
    inside = np.arange(t)[None] < (np.maximum(np.clip(e, 0, t), cs) - cs)[:, None]
    assert (got[~inside] == -np.inf).all()
    assert calc_diff(got[inside], want[inside]) < 1e-3  # bf16 weights and reduction
