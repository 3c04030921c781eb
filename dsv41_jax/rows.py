"""Request -> query-row bookkeeping shared by every op (speculative rows, per-row page tables).

The one place lengths are normalised: `clamp_lengths` (decode), `row_lengths` (a decode step's
query rows) and `prefill_ranges` (ragged prefill rows). Every op that derives a row's visible
positions from user lengths goes through them, so the logits, the block scores, the candidate
table and the selection of one call all see the same clamped lengths: traced values cannot be
checked, and a layer that clamped at another bound (the logits width, say) would disagree with
the others about which block is the newest.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax import _checks
from dsv41_jax.types import QueryBundle


def clamp_lengths(lengths: jax.Array, capacity: int | jax.Array | None = None) -> jax.Array:
    """int32 lengths: any integer type saturated to the int32 range (`_checks.int32`), then
    clamped to `[0, capacity]` (`capacity`: the positions a request's page table holds,
    `max_pages·page_size`; None: no bound but int32's)."""
    # A capacity past int32 (a page table of more positions) bounds nothing an int32 can hold.
    hi = _checks.INT32_MAX if capacity is None else capacity
    if isinstance(hi, int):
        hi = min(hi, _checks.INT32_MAX)
    return jnp.clip(_checks.int32(lengths), 0, hi)


def row_lengths(context_lens: jax.Array, next_n: int, capacity: int | None = None) -> jax.Array:
    """int32 `[batch·next_n]`: row `j` of a request of length L sees `max(L - next_n + 1 + j, 0)`,
    L first clamped to `[0, capacity]` (`clamp_lengths`: the request's length is what the
    page table bounds, so row `j` of a request past capacity sees `capacity - next_n + 1 + j`).

    Raises ValueError naming the argument: `next_n` not a positive int, `capacity` not None or
    a non-negative int, `context_lens` not an integer `[batch]`."""
    next_n = _checks.positive_int(next_n, "next_n")
    if capacity is not None:
        capacity = _checks.nonnegative_int(capacity, "capacity")
    context_lens = _checks.array(context_lens, "context_lens")
    _checks.rank(context_lens, 1, "context_lens")
    _checks.integer(context_lens, "context_lens")
    lens = clamp_lengths(context_lens, capacity)[:, None] - next_n + 1
    return jnp.maximum(lens + jnp.arange(next_n, dtype=jnp.int32), 0).reshape(-1)


def prefill_ranges(
    starts: jax.Array, ends: jax.Array, num_keys: int
) -> tuple[jax.Array, jax.Array]:
    """int32 (starts, ends) of ragged prefill rows clamped to `0 <= starts <= ends <= num_keys`
    (what every prefill op reads for traced ranges outside the key buffer)."""
    s = jnp.clip(_checks.int32(starts), 0, num_keys)
    return s, jnp.clip(_checks.int32(ends), s, num_keys)


def prefill_lengths(starts: jax.Array, ends: jax.Array, num_keys: int) -> jax.Array:
    """int32 `[rows]`: positions a ragged prefill row sees, `ends - starts` after
    `prefill_ranges` (so a row `[-3, 99)` over 30 keys sees 30, not 102)."""
    s, e = prefill_ranges(starts, ends, num_keys)
    return e - s


def row_block_table(block_table: jax.Array, next_n: int) -> jax.Array:
    """The per-request page table repeated for each of the request's `next_n` rows."""
    return jnp.repeat(_checks.int32(block_table), next_n, axis=0)


def rows_as_requests(query: QueryBundle) -> QueryBundle:
    """The bundle with every query row its own request (`[batch·next_n, 1, H, D]`), for lengths
    that are per row and not of the `L - next_n + 1 + j` form (a DCP device's share of them)."""
    rows = query.num_rows

    def one(x: jax.Array) -> jax.Array:
        return x.reshape(rows, 1, *x.shape[2:])

    scales = None if query.scales is None else one(query.scales)
    return QueryBundle(one(query.values), one(query.weights), scales, query.format)


def shift_rows(
    scores: jax.Array, starts: jax.Array | None, lengths: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(row values at logical positions `p` = column `starts + p`, lengths clamped to the row)."""
    n = scores.shape[1]
    if starts is None:
        return scores, clamp_lengths(lengths, n)
    starts = clamp_lengths(starts, n)
    cols = jnp.minimum(starts[:, None] + jnp.arange(n, dtype=jnp.int32)[None], n - 1)
    vals = jnp.take_along_axis(scores, cols, axis=1)
    return vals, clamp_lengths(lengths, n - starts)
