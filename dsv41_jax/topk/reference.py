"""Pure-jax.numpy selection: the oracle of every top-k kernel.

Order: larger score first, equal scores -> smaller position first; outputs ascending, -1 padded.
Scores are compared as numbers through their bits (`ordering.score_keys`): -0.0 ties +0.0 and
denormals order on every backend.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax import _checks
from dsv41_jax.ordering import candidate_member, num_blocks, ordered_select
from dsv41_jax.rows import shift_rows
from dsv41_jax.types import INT32_MAX, CandidateTable


def topk(
    scores: jax.Array,
    lengths: jax.Array,
    k: int,
    starts: jax.Array | None,
    candidates: jax.Array | None,
    block_size: int,
) -> jax.Array:
    vals, lens = shift_rows(scores, starts, lengths)
    pos = jnp.arange(vals.shape[1], dtype=jnp.int32)[None]
    eligible = (pos < lens[:, None]) & ~jnp.isnan(vals) & (vals != -jnp.inf)
    if candidates is not None:
        nb = -(-vals.shape[1] // block_size)
        member = candidate_member(candidates, nb)
        eligible &= jnp.take_along_axis(member, jnp.broadcast_to(pos // block_size, vals.shape), 1)
    return ordered_select(vals, eligible, k)


def sparse_columns_to_positions(
    columns: jax.Array, table: CandidateTable, block_size: int
) -> jax.Array:
    # Saturated, not wrapped: an int64 block 2**32 + 1 is no block 1, a column 2**32 no 0.
    columns, blocks = _checks.int32(columns), _checks.int32(table.blocks)
    c = blocks.shape[1]
    slot = jnp.maximum(columns, 0) // block_size
    if c == 0:
        return jnp.full(columns.shape, -1, jnp.int32)
    blk = jnp.take_along_axis(blocks, jnp.minimum(slot, c - 1), axis=1)
    # A column past the table, or of a padding or negative block, names no position (only a
    # table that is not canonical has one below its valid_lens), nor does one of a block whose
    # positions pass int32 (a hand-made id): -1, never a negative or wrapped position.
    ok = (columns >= 0) & (slot < c) & (blk >= 0) & (blk != INT32_MAX)
    ok &= blk <= _checks.largest_id(block_size)
    return jnp.where(ok, blk * block_size + columns % block_size, -1).astype(jnp.int32)


def logical_to_physical(indices: jax.Array, block_table: jax.Array, page_size: int) -> jax.Array:
    max_pages = block_table.shape[1]
    block_table = _checks.addressable_pages(_checks.int32(block_table), page_size)
    indices = _checks.int32(indices)
    page_col = indices // page_size
    ok = (indices >= 0) & (page_col < max_pages)
    page = jnp.take_along_axis(block_table, jnp.clip(page_col, 0, max_pages - 1), axis=1)
    ok &= page >= 0
    return jnp.where(ok, page * page_size + indices % page_size, -1).astype(jnp.int32)


def select_candidate_blocks(
    block_scores: jax.Array, lengths: jax.Array, num_candidates: int, block_size: int
) -> jax.Array:
    nb = block_scores.shape[1]
    nblocks = jnp.minimum(num_blocks(lengths, block_size), nb)
    ids = jnp.arange(nb, dtype=jnp.int32)[None]
    scores = jnp.where(jnp.isnan(block_scores), -jnp.inf, block_scores)
    return ordered_select(
        scores, ids < nblocks[:, None], num_candidates, priority=ids == nblocks[:, None] - 1
    )
