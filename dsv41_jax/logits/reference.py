"""Pure-jax.numpy logits: the oracle of every logits kernel.

`logits[r, t] = (Σ_h w[r, h] · relu(q[r, h] · k[t])) · s[t]` in fp32 (docs/contract.md). Columns a
row cannot see are -inf, positions on invalid pages NaN: nothing downstream can select either.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from dsv41_jax import _checks, quant
from dsv41_jax.rows import prefill_ranges, row_lengths
from dsv41_jax.types import INT32_MAX, CandidateTable, KeyBuffer, PagedIndexCache, QueryBundle

_HIGHEST = lax.Precision.HIGHEST  # no TF32 on GPU: the reference is exact fp32


def dequantize_query(query: QueryBundle) -> jax.Array:
    """float32 `[batch, next_n, H, D]` (MXFP4 block scales applied; FP8 scale is in weights)."""
    if query.format == "fp8":
        return query.values.astype(jnp.float32)
    assert query.scales is not None  # mxfp4 queries carry their exponents (checked by the API)
    return quant.dequantize_mxfp4(query.values, query.scales)


def _cache_keys(cache: PagedIndexCache, pages: jax.Array, offsets: jax.Array):
    """(keys `[..., D]`, per-token scale `[...]`) at (page, offset); invalid pages give NaN."""
    vbytes, sbytes = quant.split_pages(cache)
    ok = (pages >= 0) & (pages < cache.num_pages)
    pg = jnp.where(ok, pages, 0)
    raw, sc = vbytes[pg, offsets], sbytes[pg, offsets]
    if cache.format == "fp8":
        k = lax.bitcast_convert_type(raw, jnp.float8_e4m3fn).astype(jnp.float32)
        s = lax.bitcast_convert_type(sc, jnp.float32)
    else:
        k = quant.dequantize_mxfp4(raw, sc[..., : cache.head_dim // quant.MX_BLOCK])
        s = jnp.ones(pages.shape, jnp.float32)
    return k, jnp.where(ok, s, jnp.nan)


def _score(q: jax.Array, w: jax.Array, k: jax.Array, s: jax.Array) -> jax.Array:
    """q `[n, H, D]`, w `[n, H]`, k `[T, D]`, s `[T]` -> `[n, T]`."""
    dots = jnp.einsum("nhd,td->nht", q, k, precision=_HIGHEST)
    return jnp.einsum("nht,nh->nt", jnp.maximum(dots, 0.0), w, precision=_HIGHEST) * s[None]


def paged_mqa_logits(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    num_columns: int,
) -> jax.Array:
    q, next_n, p = dequantize_query(query), query.next_n, cache.page_size
    t = jnp.arange(num_columns)
    page_col = t // p
    # Lengths clamped to what the page table holds (and the width), as the kernels clamp them.
    capacity = min(block_table.shape[1] * p, num_columns)
    rows = row_lengths(context_lens, next_n, capacity).reshape(query.batch, next_n)

    def one(args):
        qb, wb, row_len, bt = args
        idx_ok = page_col < bt.shape[0]
        pages = jnp.where(idx_ok, bt[jnp.minimum(page_col, bt.shape[0] - 1)], -1)
        k, s = _cache_keys(cache, pages, t % p)
        out = _score(qb, wb, k, s)
        return jnp.where(t[None] < row_len[:, None], out, -jnp.inf)

    # One request at a time keeps the dequantized keys at [num_columns, D].
    out = lax.map(one, (q, query.weights, rows, block_table))
    return out.reshape(query.num_rows, num_columns)


def sparse_paged_mqa_logits(
    query: QueryBundle,
    cache: PagedIndexCache,
    table: CandidateTable,
    row_lens: jax.Array,
    row_block_table: jax.Array,
    block_size: int,
) -> jax.Array:
    q = dequantize_query(query)
    q = q.reshape(query.num_rows, 1, query.num_heads, q.shape[-1])  # no -1: rows may be 0
    w = query.weights.reshape(query.num_rows, 1, query.num_heads)
    p, c = cache.page_size, table.num_candidates
    j = jnp.arange(c * block_size)
    last = _checks.largest_id(block_size)

    def one(args):
        qr, wr, blocks, valid, length, bt = args
        blk = blocks[j // block_size]
        # Padding, negative ids and ids whose positions pass int32 (a hand-made table) name no
        # position: their product would wrap, possibly into the row.
        real = (blk >= 0) & (blk != INT32_MAX) & (blk <= last)
        pos = jnp.where(real, blk, 0) * block_size + j % block_size
        ok = (j < valid) & real & (pos < length)
        ok &= pos // p < bt.shape[0]
        pages = jnp.where(ok, bt[jnp.clip(pos // p, 0, bt.shape[0] - 1)], 0)
        k, s = _cache_keys(cache, pages, pos % p)
        return jnp.where(ok, _score(qr, wr, k, s)[0], -jnp.inf)

    blocks, valid = _checks.int32(table.blocks), _checks.int32(table.valid_lens)
    args = (q, w, blocks, valid, _checks.int32(row_lens), row_block_table)
    return lax.map(one, args)


def mqa_logits(
    query: QueryBundle, keys: KeyBuffer, starts: jax.Array, ends: jax.Array, relative: bool
) -> jax.Array:
    q = dequantize_query(query)
    q = q.reshape(query.num_rows, query.num_heads, q.shape[-1])  # no -1: rows may be 0
    w = query.weights.reshape(query.num_rows, query.num_heads)
    if keys.format == "fp8":
        k, s = keys.values.astype(jnp.float32), keys.scales
    else:
        k, s = quant.dequantize_mxfp4(keys.values, keys.scales), jnp.ones(keys.num_tokens)
    n = keys.num_tokens
    t = jnp.arange(n)

    def one(args):
        qr, wr, ks, ke = args
        out = _score(qr[None], wr[None], k, s)[0]
        if relative:  # column j is key ks + j
            out = jnp.take(out, jnp.minimum(ks + t, n - 1))
            return jnp.where(t < ke - ks, out, -jnp.inf)
        return jnp.where((t >= ks) & (t < ke), out, -jnp.inf)

    return lax.map(one, (q, w, *prefill_ranges(starts, ends, n)))
