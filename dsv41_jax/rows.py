"""Request -> query-row bookkeeping shared by every op (speculative rows, per-row page tables)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax import _checks


def row_lengths(context_lens: jax.Array, next_n: int) -> jax.Array:
    """int32 `[batch·next_n]`: row `j` of a request of length L sees `max(L - next_n + 1 + j, 0)`"""
    lens = _checks.int32(context_lens)[:, None] - next_n + 1 + jnp.arange(next_n, dtype=jnp.int32)
    return jnp.maximum(lens, 0).reshape(-1)


def prefill_lengths(starts: jax.Array, ends: jax.Array) -> jax.Array:
    """int32 `[rows]`: positions `[starts, ends)` a ragged prefill row sees (0 when empty)."""
    return jnp.maximum(_checks.int32(ends) - _checks.int32(starts), 0)


def row_block_table(block_table: jax.Array, next_n: int) -> jax.Array:
    """The per-request page table repeated for each of the request's `next_n` rows."""
    return jnp.repeat(_checks.int32(block_table), next_n, axis=0)


def shift_rows(
    scores: jax.Array, starts: jax.Array | None, lengths: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(row values at logical positions `p` = column `starts + p`, lengths clamped to the row)."""
    n = scores.shape[1]
    if starts is None:
        return scores, jnp.clip(_checks.int32(lengths), 0, n)
    starts = jnp.clip(_checks.int32(starts), 0, n)
    cols = jnp.minimum(starts[:, None] + jnp.arange(n, dtype=jnp.int32)[None], n - 1)
    vals = jnp.take_along_axis(scores, cols, axis=1)
    return vals, jnp.clip(_checks.int32(lengths), 0, n - starts)
