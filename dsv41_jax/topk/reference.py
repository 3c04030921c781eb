"""Pure-jax.numpy selection: the oracle of every top-k kernel.

Order: larger score first, equal scores -> smaller position first; outputs ascending, -1 padded.
Scores are compared as numbers (-0.0 == +0.0), so keys are canonicalised before the sort.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from dsv41_jax.types import INT32_MAX, CandidateTable


def shift_rows(scores: jax.Array, starts: jax.Array | None, lengths: jax.Array):
    """(row values at logical positions `p` = column `starts + p`, lengths clamped to the row)."""
    n = scores.shape[1]
    if starts is None:
        return scores, jnp.clip(lengths.astype(jnp.int32), 0, n)
    starts = jnp.clip(starts.astype(jnp.int32), 0, n)
    cols = jnp.minimum(starts[:, None] + jnp.arange(n, dtype=jnp.int32)[None], n - 1)
    vals = jnp.take_along_axis(scores, cols, axis=1)
    return vals, jnp.clip(lengths.astype(jnp.int32), 0, n - starts)


def ordered_select(
    scores: jax.Array,
    eligible: jax.Array,
    k: int,
    priority: jax.Array | None = None,
    ids: jax.Array | None = None,
) -> jax.Array:
    """The k best eligible entries of each row by (priority first, score desc, id asc).

    `ids` (int32, default the column index) name the entries: ties go to the smaller id and the
    output lists ids. Returns int32 `[rows, k]` ids in ascending order, padded with -1.
    """
    rows, n = scores.shape
    if ids is None:
        ids = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (rows, n))
    neg = jnp.where(scores == 0, 0.0, -scores.astype(jnp.float32))  # -0.0 ties +0.0
    keys = [(~eligible).astype(jnp.int32)]
    if priority is not None:
        keys.append((~priority).astype(jnp.int32))
    keys += [neg, jnp.where(eligible, ids, INT32_MAX)]
    ranked = lax.sort(keys, dimension=1, num_keys=len(keys))
    take = min(k, n)
    chosen = jnp.where(ranked[0][:, :take] == 0, ranked[-1][:, :take], INT32_MAX)
    chosen = jnp.sort(chosen, axis=1)
    chosen = jnp.where(chosen == INT32_MAX, -1, chosen)
    return jnp.pad(chosen, ((0, 0), (0, k - take)), constant_values=-1)


def candidate_member(table_blocks: jax.Array, num_blocks: int) -> jax.Array:
    """bool `[rows, num_blocks]`: is block b in the row's table (INT32_MAX padding ignored)."""
    rows = table_blocks.shape[0]
    member = jnp.zeros((rows, num_blocks), bool)
    r = jnp.arange(rows)[:, None]
    blk = jnp.where((table_blocks >= 0) & (table_blocks < num_blocks), table_blocks, num_blocks)
    return member.at[r, blk].set(True, mode="drop")


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
    blk = jnp.take_along_axis(table.blocks, jnp.maximum(columns, 0) // block_size, axis=1)
    return jnp.where(columns >= 0, blk * block_size + columns % block_size, -1)


def logical_to_physical(indices: jax.Array, block_table: jax.Array, page_size: int) -> jax.Array:
    max_pages = block_table.shape[1]
    page_col = indices // page_size
    ok = (indices >= 0) & (page_col < max_pages)
    page = jnp.take_along_axis(block_table, jnp.clip(page_col, 0, max_pages - 1), axis=1)
    ok &= page >= 0
    return jnp.where(ok, page * page_size + indices % page_size, -1).astype(jnp.int32)
