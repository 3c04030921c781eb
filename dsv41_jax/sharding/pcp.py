"""Prefill context parallel (PCP): the packed prefill keys are split into equal chunks over the
ranks and each rank scores its own query rows against the all-gathered buffer
(`pcp_publish_prefill` / `pcp_select_prefill`, inside the caller's `shard_map`)."""

from __future__ import annotations

import functools

import jax
from jax import lax

from dsv41_jax import _checks
from dsv41_jax._dispatch import Implementation
from dsv41_jax.config import IndexerConfig
from dsv41_jax.indexer import publish_prefill, select_prefill
from dsv41_jax.logits.api import check_ragged
from dsv41_jax.rows import prefill_ranges
from dsv41_jax.sharding._axis import bound_axis
from dsv41_jax.types import CandidateTable, KeyBuffer, QueryBundle


def pcp_keys(keys: KeyBuffer, *, axis: str) -> KeyBuffer:
    """The whole packed key buffer from each rank's chunk (prefill context parallelism); call
    inside `shard_map` over `axis`.

    Padding rule: the packed keys are split into W equal chunks of `ceil(T / W)` tokens in
    order, rank r holding tokens `[r·ceil(T/W), (r+1)·ceil(T/W))`, the last chunk zero-padded.
    Every rank then contributes the same all-gather shape, and the gathered buffer is the
    original one followed by padding no row sees (`ends <= T`), so positions need no remapping.
    One all-gather of `T·(D + 4)` bytes (fp8) per layer.
    """
    if not isinstance(keys, KeyBuffer):
        raise ValueError(f"keys must be a KeyBuffer, got {type(keys).__name__}")
    keys.check_one_layer("keys")
    bound_axis(axis, "pcp_keys")
    gather = functools.partial(lax.all_gather, axis_name=axis, axis=0, tiled=True)
    return KeyBuffer(gather(keys.values), gather(keys.scales), keys.format)


def _pcp_inputs(
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    axis: str,
    num_keys: int | None,
    fn: str,
) -> tuple[KeyBuffer, jax.Array, jax.Array]:
    """(the gathered keys, the rows' ranges clamped to the `num_keys` real keys).

    The gathered buffer ends with the padding rule's zero keys: a traced end past T would reach
    them where one device clamps it to T, so the ranges are clamped to T first."""
    bound_axis(axis, fn)
    full = pcp_keys(keys, axis=axis)
    padded = full.num_tokens
    if num_keys is None:
        num_keys = padded
    num_keys = _checks.static_int(num_keys, "num_keys")
    world = lax.axis_size(axis)
    if not 0 <= num_keys <= padded or -(-num_keys // world) * world != padded:
        raise ValueError(
            f"num_keys must be the T keys before padding: {world} chunks of "
            f"{padded // world} keys hold T in ({padded - padded // world}, {padded}], "
            f"got {num_keys}"
        )
    check_ragged(query, full, starts, ends)  # names a bad argument before it is clamped
    return full, *prefill_ranges(starts, ends, num_keys)


def pcp_publish_prefill(
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    config: IndexerConfig,
    *,
    axis: str,
    num_keys: int | None = None,
    row_chunk: int | None = None,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> tuple[jax.Array, CandidateTable]:
    """`publish_prefill` with the key buffer split over `axis` (`pcp_keys`' padding rule) and
    each rank scoring its own query rows (`query`, `starts`, `ends`: this rank's rows, ranges in
    global key positions); call inside `shard_map`. Equal, row for row, to `publish_prefill` on
    one device.

    `num_keys`: T, the packed keys before the last chunk's zero padding (static). Traced ranges
    are clamped to `[0, T]` as on one device; None means no padding (T = W·chunk), and then a
    traced end past the real keys would see the padding's zero keys. `row_chunk`,
    `implementation`, `topk_algorithm`: as in `publish_prefill`."""
    full, starts, ends = _pcp_inputs(
        query, keys, starts, ends, axis, num_keys, "pcp_publish_prefill"
    )
    return publish_prefill(
        query,
        full,
        starts,
        ends,
        config,
        row_chunk=row_chunk,
        implementation=implementation,
        topk_algorithm=topk_algorithm,
    )


def pcp_select_prefill(
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    table: CandidateTable,
    config: IndexerConfig,
    *,
    axis: str,
    num_keys: int | None = None,
    row_chunk: int | None = None,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> jax.Array:
    """`select_prefill` under prefill context parallelism (as `pcp_publish_prefill`, `num_keys`,
    `implementation` and `topk_algorithm` included; `table`: this rank's rows of the published
    table)."""
    full, starts, ends = _pcp_inputs(
        query, keys, starts, ends, axis, num_keys, "pcp_select_prefill"
    )
    return select_prefill(
        query,
        full,
        starts,
        ends,
        table,
        config,
        row_chunk=row_chunk,
        implementation=implementation,
        topk_algorithm=topk_algorithm,
    )
