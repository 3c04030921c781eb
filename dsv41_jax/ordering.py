"""The contract's ordering and block-membership rules in one place, for the reference ops and the
sharded merges: score keys, (score desc, id asc) selection, candidate-block membership, block
counts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from dsv41_jax import _checks
from dsv41_jax.types import INT32_MAX


def num_blocks(lengths: jax.Array, block_size: int) -> jax.Array:
    n = jnp.maximum(_checks.int32(lengths), 0)  # ceil without the int32 overflow of n + B - 1
    return n // block_size + (n % block_size != 0).astype(jnp.int32)


def every_block(lengths: jax.Array, num_candidates: int, block_size: int) -> jax.Array:
    """int32 `[rows, C]`: every block of each row, ascending, -1 padded: what the top-C block
    selection returns when no row has more than C blocks."""
    ids = jnp.arange(num_candidates, dtype=jnp.int32)[None]
    return jnp.where(ids < num_blocks(lengths, block_size)[:, None], ids, -1)


def score_keys(scores: jax.Array) -> jax.Array:
    """int32 keys in the scores' numeric order, from their bits: a larger score has a larger key,
    -0.0 and +0.0 share key 0, and denormals order as the numbers they are (XLA's CPU backend
    flushes them to zero in float compares and max; integer compares see every bit).

    The float32 bits are sign-magnitude; the key is the signed magnitude, so it lies in
    `[-INT32_MAX, INT32_MAX]` (negating a key never overflows). NaN keys lie past ±inf (by its
    sign bit): callers exclude NaN before comparing. Any float dtype widens to float32 exactly.
    """
    bits = lax.bitcast_convert_type(scores.astype(jnp.float32), jnp.int32)
    return jnp.where(bits < 0, -(bits & INT32_MAX), bits)


def key_scores(keys: jax.Array) -> jax.Array:
    """float32 scores of `score_keys` keys, exactly (key 0 is +0.0)."""
    bits = jnp.where(keys < 0, (-keys) | jnp.int32(_checks.INT32_MIN), keys)
    return lax.bitcast_convert_type(bits, jnp.float32)


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
    keys = [(~eligible).astype(jnp.int32)]
    if priority is not None:
        keys.append((~priority).astype(jnp.int32))
    keys += [-score_keys(scores), jnp.where(eligible, ids, INT32_MAX)]
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
