"""How much of a dense top-k the two-level selection keeps: per-row overlap of two selections."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax import _checks


def selection_overlap(selected: jax.Array, reference: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-row overlap of two `[rows, k]` selections (positions, -1 padded, each row ascending
    or not), each row taken as a set: negative entries are padding, repeats count once.

    Returns float32 `(jaccard, recall)`, each `[rows]`: `|A ∩ R| / |A ∪ R|` and `|A ∩ R| / |R|`
    for A = `selected`, R = `reference` (e.g. a consumer's two-level selection against a dense
    top-k over the same logits). Both are 1.0 for two empty rows. Rows whose context fits in the
    published blocks (`len <= C·B`) are exactly 1.0 by the contract.
    """
    selected = _checks.array(selected, "selected")
    reference = _checks.array(reference, "reference")
    _checks.rank(selected, 2, "selected")
    _checks.shape(reference, (selected.shape[0], None), "reference")
    _checks.integer(selected, "selected")
    _checks.integer(reference, "reference")
    width = max(jnp.dtype(selected.dtype).itemsize, jnp.dtype(reference.dtype).itemsize, 4)
    (a, ok_a), (r, ok_r) = _ids(selected, width), _ids(reference, width)
    first_a, first_r = _first_occurrences(a, ok_a), _first_occurrences(r, ok_r)
    hit = jnp.any((a[:, :, None] == r[:, None, :]) & ok_r[:, None, :], axis=2) & first_a
    inter = jnp.sum(hit, axis=1).astype(jnp.float32)
    na = jnp.sum(first_a, axis=1).astype(jnp.float32)
    nr = jnp.sum(first_r, axis=1).astype(jnp.float32)
    union = na + nr - inter
    jaccard = jnp.where(union > 0, inter / jnp.maximum(union, 1), 1.0)
    recall = jnp.where(nr > 0, inter / jnp.maximum(nr, 1), 1.0)
    return jaccard, recall


def _ids(x: jax.Array, width: int) -> tuple[jax.Array, jax.Array]:
    """(ids as unsigned ints of `width` bytes, which entries are positions): every id of either
    argument's type is exact there, so ids past int32 (int64 under x64, uint32) are compared as
    themselves, not saturated to one value; negative entries are padding."""
    ok = x >= 0 if jnp.issubdtype(x.dtype, jnp.signedinteger) else jnp.ones(x.shape, bool)
    wide = jnp.uint64 if width > 4 else jnp.uint32
    return jnp.where(ok, x, 0).astype(wide), ok


def _first_occurrences(x: jax.Array, ok: jax.Array) -> jax.Array:
    """bool `[rows, k]`: entry j is a position (`ok`) not already in the row before column j."""
    k = x.shape[1]
    earlier = jnp.tril(jnp.ones((k, k), bool), -1)  # [j, i]: i < j
    repeat = jnp.any((x[:, :, None] == x[:, None, :]) & ok[:, None, :] & earlier[None], axis=2)
    return ok & ~repeat
