"""How much of a dense top-k the two-level selection keeps: per-row overlap of two selections."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax import _checks


def selection_overlap(selected: jax.Array, reference: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-row overlap of two `[rows, k]` selections (positions, -1 padded, each row ascending
    or not; repeats are not expected).

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
    a, r = selected.astype(jnp.int32), reference.astype(jnp.int32)
    hit = (a[:, :, None] == r[:, None, :]) & (a[:, :, None] >= 0)
    inter = jnp.sum(jnp.any(hit, axis=2), axis=1).astype(jnp.float32)
    na = jnp.sum(a >= 0, axis=1).astype(jnp.float32)
    nr = jnp.sum(r >= 0, axis=1).astype(jnp.float32)
    union = na + nr - inter
    jaccard = jnp.where(union > 0, inter / jnp.maximum(union, 1), 1.0)
    recall = jnp.where(nr > 0, inter / jnp.maximum(nr, 1), 1.0)
    return jaccard, recall
