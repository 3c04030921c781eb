"""Paged, sparse and prefill MQA logits against the float64 loop oracle."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from factories import calc_diff, paged_cache, query, visible_mask

import dsv41_jax as dj

RTOL, ATOL = 2e-5, 1e-4  # fp32 accumulation vs float64 of the same quantized inputs


def oracle_inputs(q: dj.QueryBundle):
    qv = np.asarray(q.values).view(np.uint8) if q.format == "mxfp4" else np.asarray(q.values)
    qs = None if q.scales is None else np.asarray(q.scales)
    w = np.asarray(q.weights, np.float64).reshape(q.num_rows, q.num_heads)
    return oracle.query_rows(qv, qs, q.format), w


def check_dense(got, want, lens_rows):
    for r in range(got.shape[0]):
        for t in range(got.shape[1]):
            if t >= lens_rows[r]:
                assert got[r, t] == -np.inf, (r, t)
            elif math.isnan(want[(r, t)]):
                assert np.isnan(got[r, t]), (r, t)
            else:
                np.testing.assert_allclose(got[r, t], want[(r, t)], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("fmt,d", [("fp8", 64), ("mxfp4", 128)])
@pytest.mark.parametrize("next_n", [1, 2])
def test_paged_mqa_logits_matches_oracle(rng, fmt, d, next_n):
    batch, pages, p, h = 5, 4, 16, 4
    cache, bt = paged_cache(rng, batch, pages, p, d, fmt)
    q = query(rng, batch, next_n, h, d, fmt)
    lens = np.array([0, 1, 9, 33, pages * p], np.int32)
    got = np.asarray(dj.paged_mqa_logits(q, cache, jnp.asarray(lens), bt))
    assert got.shape == (batch * next_n, 256)  # 64 positions of page table, rounded up to 256
    qq, w = oracle_inputs(q)
    want = oracle.paged_logits(
        qq, w, np.asarray(cache.data), fmt, lens, np.asarray(bt), next_n, pages * p, p
    )
    check_dense(got, want, np.asarray(dj.row_lengths(jnp.asarray(lens), next_n)))


def test_paged_mqa_logits_invalid_pages_are_nan_and_num_columns(rng):
    batch, pages, p, d, h = 2, 3, 16, 64, 4
    cache, bt = paged_cache(rng, batch, pages, p, d)
    bt = np.asarray(bt).copy()
    bt[0, 1] = -1
    bt[1, 0] = cache.num_pages + 5
    q = query(rng, batch, 1, h, d)
    lens = np.array([40, 20], np.int32)
    got = np.asarray(
        dj.paged_mqa_logits(q, cache, jnp.asarray(lens), jnp.asarray(bt), num_columns=40)
    )
    assert got.shape == (2, 40)
    qq, w = oracle_inputs(q)
    want = oracle.paged_logits(qq, w, np.asarray(cache.data), "fp8", lens, bt, 1, 40, p)
    check_dense(got, want, lens)
    assert np.isnan(got[0, 16:32]).all() and np.isnan(got[1, :16]).all()


@pytest.mark.parametrize("fmt,d", [("fp8", 64), ("mxfp4", 64)])
def test_sparse_paged_logits_equal_dense_at_candidate_positions(rng, fmt, d):
    batch, pages, p, h, b, c = 4, 6, 16, 4, 8, 5
    cache, bt = paged_cache(rng, batch, pages, p, d, fmt)
    q = query(rng, batch, 2, h, d, fmt)
    lens = jnp.array([0, 7, 40, 96], jnp.int32)
    rows = dj.row_lengths(lens, 2)
    dense = dj.paged_mqa_logits(q, cache, lens, bt)
    amax = dj.block_amax(dense, rows, block_size=b)
    sel = dj.select_candidate_blocks(amax, rows, num_candidates=c, block_size=b)
    table = dj.sort_candidate_blocks(
        sel, rows, dj.row_block_table(bt, 2), block_size=b, page_size=p
    )
    sparse = np.asarray(dj.sparse_paged_mqa_logits(q, cache, table, lens, bt, block_size=b))
    assert sparse.shape == (8, c * b)
    dense, blocks, valid = np.asarray(dense), np.asarray(table.blocks), np.asarray(table.valid_lens)
    for r in range(8):
        for j in range(c * b):
            if j >= valid[r]:
                assert sparse[r, j] == -np.inf
            else:
                pos = blocks[r, j // b] * b + j % b
                # The two reference programs contract their dot products in other shapes, and
                # XLA's CPU code may round them an ulp apart (seen: 2.5e-6 on a logit of 0.03
                # summed from terms of order 1): equal up to that, not bitwise.
                np.testing.assert_allclose(sparse[r, j], dense[r, pos], rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("fmt,d", [("fp8", 64), ("mxfp4", 64)])
def test_prefill_mqa_logits_matches_oracle(rng, fmt, d):
    t, h = 24, 4
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((t, d)).astype(np.float32)), fmt)
    q = query(rng, 6, 1, h, d, fmt)
    starts = np.array([0, 0, 5, 10, 23, 24], np.int32)
    ends = np.array([0, 1, 17, 24, 24, 24], np.int32)
    got = np.asarray(dj.mqa_logits(q, keys, jnp.asarray(starts), jnp.asarray(ends)))
    qq, w = oracle_inputs(q)
    for i in range(6):
        for col in range(t):
            if not starts[i] <= col < ends[i]:
                assert got[i, col] == -np.inf
                continue
            if fmt == "fp8":
                k = np.asarray(keys.values[col]).astype(np.float64)
                s = float(keys.scales[col])
            else:
                data = np.concatenate(
                    [
                        np.asarray(keys.values[col]),
                        np.asarray(keys.scales[col]),
                        np.full(4 - d // 32, 127, np.uint8),
                    ]
                )
                k, s = oracle.cache_token(data.reshape(1, 1, 1, -1), "mxfp4", 0, 0)
            np.testing.assert_allclose(
                got[i, col], oracle.logit(qq[i], w[i], k, s), rtol=RTOL, atol=ATOL
            )


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_prefill_relative_layout_is_the_absolute_shifted(rng, fmt):
    t = 21
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((t, 64)).astype(np.float32)), fmt)
    q = query(rng, 7, 1, 4, 64, fmt)
    starts = np.array([0, 0, 5, 10, 20, 21, 3], np.int32)
    ends = np.array([0, 1, 17, 21, 21, 21, 3], np.int32)
    absolute = np.asarray(dj.mqa_logits(q, keys, jnp.asarray(starts), jnp.asarray(ends)))
    rel = np.asarray(dj.mqa_logits(q, keys, jnp.asarray(starts), jnp.asarray(ends), relative=True))
    for i in range(7):
        n = ends[i] - starts[i]
        np.testing.assert_array_equal(rel[i, :n], absolute[i, starts[i] : ends[i]])
        assert (rel[i, n:] == -np.inf).all()
    # Traced out-of-range ranges are clamped, in both layouts alike.
    f = jax.jit(lambda s, e: dj.mqa_logits(q, keys, s, e, relative=True))
    bad = np.asarray(f(jnp.asarray(starts - 9), jnp.asarray(ends + 9)))
    # The same compiled function on pre-clamped ranges: XLA may fuse the eager and jitted
    # dot products differently on another CPU, so only one program is compared bitwise.
    want = np.asarray(
        f(jnp.asarray(np.clip(starts - 9, 0, t)), jnp.asarray(np.clip(ends + 9, 0, t)))
    )
    np.testing.assert_array_equal(bad, want)


def test_paged_mqa_logits_jit_and_repeatable(rng):
    cache, bt = paged_cache(rng, 3, 4, 16, 64)
    q = query(rng, 3, 1, 4, 64)
    lens = jnp.array([64, 3, 30], jnp.int32)
    f = jax.jit(dj.paged_mqa_logits)
    first = np.asarray(f(q, cache, lens, bt))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(q, cache, lens, bt)), first)


def _bad_cases():
    rng = np.random.default_rng(0)
    cache, bt = paged_cache(rng, 2, 2, 16, 64)
    q = query(rng, 2, 1, 4, 64)
    q4 = query(rng, 2, 1, 4, 64, "mxfp4")
    lens = jnp.array([3, 4], jnp.int32)
    cache128, _ = paged_cache(rng, 2, 2, 16, 128)
    return [
        (lambda: dj.paged_mqa_logits(q4, cache, lens, bt), "does not match the cache"),
        (lambda: dj.paged_mqa_logits(q, cache128, lens, bt), "head_dim"),
        (lambda: dj.paged_mqa_logits(q, cache, lens[:1], bt), "context_lens must have shape"),
        (lambda: dj.paged_mqa_logits(q, cache, lens.astype(jnp.float32), bt), "context_lens"),
        (lambda: dj.paged_mqa_logits(q, cache, lens, bt[0]), "block_table must have rank 2"),
        (lambda: dj.paged_mqa_logits(q, cache, lens + 40, bt), "context_lens must lie in"),
        (lambda: dj.paged_mqa_logits(q, cache, lens, bt, num_columns=0), "num_columns"),
        (
            lambda: dj.paged_mqa_logits(
                dj.QueryBundle(q.values, q.weights.astype(jnp.float16)), cache, lens, bt
            ),
            "query.weights must have dtype",
        ),
        (
            lambda: dj.paged_mqa_logits(
                dj.QueryBundle(q4.values, q4.weights, None, "mxfp4"), cache128, lens, bt
            ),
            "does not match|scales are required",
        ),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_logits_bad_inputs_raise(case):
    call, match = _bad_cases()[case]
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------ the FFI kernels on the GPU (device machine)


@pytest.mark.gpu
@pytest.mark.parametrize("heads,next_n", [(32, 1), (64, 1), (32, 2), (64, 2)])
def test_ffi_paged_logits_match_reference(rng, heads, next_n):
    batch, pages, p, d = 6, 24, 64, 128
    cache, bt = paged_cache(rng, batch, pages, p, d)
    q = query(rng, batch, next_n, heads, d)
    lens = jnp.asarray(np.array([0, 1, 63, 64, 65, pages * p], np.int32))
    got = np.asarray(dj.paged_mqa_logits(q, cache, lens, bt, implementation="ffi"))
    want = np.asarray(dj.paged_mqa_logits(q, cache, lens, bt, implementation="reference"))
    vis = visible_mask(np.asarray(dj.row_lengths(lens, next_n)), got.shape[1])
    assert np.isfinite(got[vis]).all()
    # DeepGEMM's own criterion against dequantized inputs. Hopper's FP8 tensor cores accumulate
    # with reduced precision, so single logits may differ by ~1e-3 of the row's scale.
    assert calc_diff(got[vis], want[vis]) < 5e-6
    scale = np.abs(want[vis]).max()
    np.testing.assert_allclose(got[vis], want[vis], rtol=0, atol=2e-3 * scale)


@pytest.mark.gpu
def test_ffi_paged_logits_invalid_pages_are_nan(rng):
    cache, bt = paged_cache(rng, 2, 8, 64, 128)
    bt = np.asarray(bt).copy()
    bt[0, 2], bt[1, 0] = -1, cache.num_pages + 7
    q = query(rng, 2, 1, 32, 128)
    lens = jnp.array([512, 300], jnp.int32)
    got = np.asarray(dj.paged_mqa_logits(q, cache, lens, jnp.asarray(bt), implementation="ffi"))
    assert np.isnan(got[0, 128:192]).all() and np.isnan(got[1, :64]).all()
    assert np.isfinite(got[0, :128]).all() and np.isfinite(got[1, 64:300]).all()


@pytest.mark.gpu
def test_ffi_logits_feed_selection_exactly(rng):
    """Columns past a row's length are unspecified from the kernel: selection never reads them,
    so selecting on the FFI logits equals selecting on the same logits cleaned to -inf."""
    cache, bt = paged_cache(rng, 4, 16, 64, 128)
    q = query(rng, 4, 2, 32, 128)
    lens = jnp.array([5, 600, 1000, 1024], jnp.int32)
    logits = dj.paged_mqa_logits(q, cache, lens, bt, implementation="ffi")
    rows = dj.row_lengths(lens, 2)
    clean = jnp.where(jnp.arange(logits.shape[1])[None] < rows[:, None], logits, -jnp.inf)
    for fn in (lambda s: dj.topk(s, rows, 64), lambda s: dj.block_amax(s, rows)):
        np.testing.assert_array_equal(np.asarray(fn(logits)), np.asarray(fn(clean)))


@pytest.mark.gpu
def test_ffi_logits_bitwise_repeatable_and_jit(rng):
    cache, bt = paged_cache(rng, 8, 32, 64, 128)
    q = query(rng, 8, 1, 64, 128)
    lens = jnp.asarray(rng.integers(0, 32 * 64, 8).astype(np.int32))
    f = jax.jit(lambda *a: dj.paged_mqa_logits(*a, implementation="ffi"))
    rows = np.asarray(lens)
    first = np.asarray(f(q, cache, lens, bt))
    vis = visible_mask(rows, first.shape[1])
    for _ in range(20):
        again = np.asarray(f(q, cache, lens, bt))
        np.testing.assert_array_equal(again[vis], first[vis])


# ------------------------------------------------ the page kernels on the CPU stand-in
def test_ragged_rows_kernel_on_the_stand_in(simt_topk):
    """The prefill rows' preparation (cuda/smxx_ragged_rows): ranges clamped to
    0 <= ks <= ke <= cols, -inf past each row's keys and nothing else written, padding rows
    given an empty range at the last row's start."""
    from selection import emulate_page_kernel

    rows, padded, cols = 7, 8, 30
    starts = np.array([0, 5, -3, 29, 40, 10, 12], np.int32)
    ends = np.array([30, 4, 7, 31, 50, 10, 20], np.int32)
    raw = emulate_page_kernel(
        simt_topk, "ragged", (rows, padded, cols), (starts, ends), np.uint32, (-1,)
    )
    logits, ranges = raw[: rows * cols].view(np.float32).reshape(rows, cols), raw[rows * cols :]
    ks = np.clip(starts, 0, cols)
    ke = np.maximum(np.clip(ends, 0, cols), ks)
    np.testing.assert_array_equal(ranges[:rows], ks)
    np.testing.assert_array_equal(ranges[padded : padded + rows], ke)
    assert ranges[rows] == ranges[padded + rows] == ks[-1]  # the padding row: empty
    untouched = np.frombuffer(b"\x7e" * 4, np.float32)[0]
    for r in range(rows):
        np.testing.assert_array_equal(logits[r, : ke[r] - ks[r]], untouched)
        assert (logits[r, ke[r] - ks[r] :] == -np.inf).all()
