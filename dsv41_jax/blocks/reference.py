"""Pure-jax.numpy block scores, candidate-block selection and the published table."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax import _checks
from dsv41_jax.ordering import key_scores, num_blocks, score_keys
from dsv41_jax.rows import clamp_lengths, shift_rows
from dsv41_jax.types import INT32_MAX, CandidateTable


def block_amax(
    scores: jax.Array,
    lengths: jax.Array,
    block_size: int,
    starts: jax.Array | None,
    pin_newest: bool,
) -> jax.Array:
    vals, lens = shift_rows(scores, starts, lengths)
    rows, n = vals.shape
    nb = -(-n // block_size)
    pos = jnp.arange(n, dtype=jnp.int32)[None]
    vals = jnp.where((pos < lens[:, None]) & ~jnp.isnan(vals), vals, -jnp.inf)
    vals = jnp.pad(vals, ((0, 0), (0, nb * block_size - n)), constant_values=-jnp.inf)
    # The max of the keys: float max would flush denormal scores to zero on XLA's CPU backend.
    keys = jnp.max(score_keys(vals.reshape(rows, nb, block_size)), axis=2)
    amax = key_scores(keys).astype(vals.dtype)
    if pin_newest:
        newest = num_blocks(lens, block_size) - 1
        amax = jnp.where(jnp.arange(nb)[None] == newest[:, None], jnp.inf, amax)
    return amax


def sort_candidate_blocks(
    selected: jax.Array,
    lengths: jax.Array,
    block_table: jax.Array,
    block_size: int,
    page_size: int,
) -> CandidateTable:
    lens = clamp_lengths(lengths, block_table.shape[1] * page_size)
    nblocks = num_blocks(lens, block_size)
    ok = (selected >= 0) & (selected < nblocks[:, None])
    blocks = jnp.sort(jnp.where(ok, selected, INT32_MAX).astype(jnp.int32), axis=1)
    dup = jnp.pad(blocks[:, 1:] == blocks[:, :-1], ((0, 0), (1, 0)))
    blocks = jnp.sort(jnp.where(dup, INT32_MAX, blocks), axis=1)
    count = jnp.sum(blocks != INT32_MAX, axis=1, dtype=jnp.int32)
    # The newest block is the only partial one; it ends the table when it was selected.
    last = jnp.take_along_axis(blocks, jnp.maximum(count - 1, 0)[:, None], axis=1)[:, 0]
    tail = jnp.where(last == nblocks - 1, (lens - 1) % block_size + 1, block_size)
    valid_lens = jnp.where(count > 0, block_size * (count - 1) + tail, 0).astype(jnp.int32)
    pos = jnp.where(blocks == INT32_MAX, 0, blocks) * block_size  # < lens: no wrap
    # A page id whose slots pass int32 is no page (-1), as in `logical_to_physical`: its block
    # slot times B would wrap.
    bt = _checks.addressable_pages(_checks.int32(block_table), page_size)
    page = jnp.take_along_axis(bt, pos // page_size, axis=1)
    slot = page * (page_size // block_size) + (pos % page_size) // block_size
    physical = jnp.where((blocks != INT32_MAX) & (page >= 0), slot, -1).astype(jnp.int32)
    return CandidateTable(blocks, count, valid_lens, physical, block_size=block_size)
