"""Decode context parallel (DCP): each device holds the compressed positions `g` with
`(g // I) % W == rank` (interleave `I`) in its own paged cache. Every device takes its local top-k
with global ids, the `(score, id)` pairs are all-gathered and re-selected in the same order;
candidate blocks come from each device's local top-C of its block maxima (global ids),
all-gathered and re-selected (or, with `exchange="pmax"`, from the all-reduced maxima of every
block). `dcp_publish` / `dcp_select` run inside the caller's `shard_map`.

Exactness of the merge: a position in the global top-k has at most k - 1 positions above it
anywhere, hence on its own device, so it is in its device's local top-k."""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax

from dsv41_jax import _checks
from dsv41_jax._dispatch import Implementation, record, shared
from dsv41_jax.blocks import block_amax, sort_candidate_blocks
from dsv41_jax.config import IndexerConfig
from dsv41_jax.indexer import _check_paged_config, _check_table
from dsv41_jax.logits import paged_mqa_logits, sparse_paged_mqa_logits
from dsv41_jax.ordering import (
    candidate_member,
    key_scores,
    num_blocks,
    ordered_select,
    score_keys,
)
from dsv41_jax.plan import check_algorithm
from dsv41_jax.plan.sharded import dcp_exchange, dcp_route
from dsv41_jax.rows import row_block_table, row_lengths, rows_as_requests
from dsv41_jax.sharding._axis import bound_axis
from dsv41_jax.sharding._dcp_local import local_table
from dsv41_jax.topk.api import select_candidate_blocks, sparse_columns_to_positions, topk
from dsv41_jax.types import INT32_MAX, CandidateTable, PagedIndexCache, QueryBundle


def _layout(world: int, rank: int | jax.Array, interleave: int) -> tuple[int, int | jax.Array, int]:
    """(W, rank, I) checked: positive ints whose cycle `W·I` is an int32 (positions are), and
    a rank in `[0, W)` (a static one; a traced one, e.g. `lax.axis_index`, is an integer)."""
    world = _checks.positive_int(world, "world")
    interleave = _checks.positive_int(interleave, "interleave")
    if world * interleave > INT32_MAX:
        raise ValueError(
            f"world x interleave must be at most 2**31 - 1 (a cycle of int32 positions), got "
            f"{world} x {interleave}"
        )
    if isinstance(rank, jax.core.Tracer):
        if rank.ndim or not jnp.issubdtype(rank.dtype, jnp.integer):
            raise ValueError(f"rank must be an integer scalar, got {rank.dtype} {rank.shape}")
        return world, rank, interleave
    r = _checks.static_int(rank, "rank")
    if not 0 <= r < world:
        raise ValueError(f"rank must lie in [0, world={world}), got {r}")
    return world, r, interleave


def dcp_local_length(
    global_lens: jax.Array, world: int, rank: int | jax.Array, interleave: int
) -> jax.Array:
    """Positions `g < L` that live on `rank`: `(g // I) % W == rank`.

    Raises ValueError naming the argument: `world` or `interleave` not a positive int (or `W·I`
    past int32), a static `rank` outside `[0, W)`, `global_lens` not an integer array."""
    world, rank, interleave = _layout(world, rank, interleave)
    global_lens = _checks.array(global_lens, "global_lens")
    _checks.integer(global_lens, "global_lens")
    cycle = world * interleave
    lens = jnp.maximum(_checks.int32(global_lens), 0)
    partial = jnp.clip(lens % cycle - rank * interleave, 0, interleave)
    return (lens // cycle) * interleave + partial


def dcp_local_to_global(
    local: jax.Array, world: int, rank: int | jax.Array, interleave: int
) -> jax.Array:
    """Local position `j` on `rank` -> global position; -1 stays -1, and so does a local
    position whose global one would pass the int32 range (no position wraps). Raises as
    `dcp_local_length` does (`local`: an integer array)."""
    world, rank, interleave = _layout(world, rank, interleave)
    local = _checks.array(local, "local")
    _checks.integer(local, "local")
    local = _checks.int32(local)
    cycle, offset = local // interleave, local % interleave
    # g = cycle·W·I + rank·I + offset <= INT32_MAX, tested without forming g (no term wraps:
    # rank·I + offset < W·I <= INT32_MAX).
    ok = (local >= 0) & (cycle <= (INT32_MAX - rank * interleave - offset) // (world * interleave))
    cycle = jnp.where(ok, cycle, 0)
    g = (cycle * world + rank) * interleave + offset
    return jnp.where(ok, g, -1).astype(jnp.int32)


def _merge_topk(scores: jax.Array, ids: jax.Array, k: int) -> jax.Array:
    """The k best (score desc, id asc) of all-gathered candidates; ascending ids, -1 padded.
    Candidates with id -1 are padding (local top-k never returns NaN or -inf)."""
    return ordered_select(scores, ids >= 0, k, ids=ids)


def _dcp_topk(
    logits: jax.Array,
    local_lens: jax.Array,
    k: int,
    member: jax.Array | None,
    axis: str,
    world: int,
    rank: jax.Array,
    interleave: int,
    implementation: Implementation,
    topk_algorithm: str | None,
) -> jax.Array:
    scores = logits if member is None else jnp.where(member, logits, -jnp.inf)
    local = topk(
        scores, local_lens, k, implementation=implementation, topk_algorithm=topk_algorithm
    )
    picked = jnp.take_along_axis(scores, jnp.maximum(local, 0), axis=1)
    return _merge_gathered(picked, local, k, axis, world, rank, interleave)


def dcp_capacity(local_capacity: int, world: int, interleave: int) -> int:
    """Global positions `[0, G)` that W devices of `local_capacity` positions each hold in
    full under interleave I: whole cycles of W·I, then the part of the next cycle before the
    first device runs out (`local_capacity % I` of its run). Traced global lengths clamp to it
    (one device clamps to its page table's capacity the same way).

    Raises ValueError naming the argument: `local_capacity` not a non-negative int, `world` or
    `interleave` not a positive int."""
    local_capacity = _checks.nonnegative_int(local_capacity, "local_capacity")
    world = _checks.positive_int(world, "world")
    interleave = _checks.positive_int(interleave, "interleave")
    return (local_capacity // interleave) * world * interleave + local_capacity % interleave


def _dcp_rows(
    query: QueryBundle,
    cache: PagedIndexCache,
    block_table: jax.Array,
    global_context_lens: jax.Array,
    axis: str,
    interleave: int,
    fn: str,
) -> tuple[int, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(W, rank, global row lengths, this device's row lengths, its page table per row).

    Each row's local length is this device's share of the row's global positions: for
    speculative rows that is not `L_local - next_n + 1 + j` (the share of L - 1 positions may
    equal that of L), so the logits kernels, which derive a request's rows that way, are
    handed every row as its own request (`rows_as_requests`)."""
    world, rank = bound_axis(axis, fn)
    global_context_lens = _checks.array(global_context_lens, "global_context_lens")
    _checks.shape(global_context_lens, (query.batch,), "global_context_lens")
    _checks.integer(global_context_lens, "global_context_lens")
    block_table = _checks.array(block_table, "block_table")
    _checks.shape(block_table, (query.batch, None), "block_table")
    _checks.integer(block_table, "block_table")
    capacity = dcp_capacity(block_table.shape[1] * cache.page_size, world, interleave)
    global_rows = row_lengths(global_context_lens, query.next_n, capacity)
    local_rows = dcp_local_length(global_rows, world, rank, interleave)
    return world, rank, global_rows, local_rows, row_block_table(block_table, query.next_n)


def _local_global_blocks(
    n_local: int, world: int, rank: jax.Array, interleave: int, block_size: int
) -> jax.Array:
    """Global block id of every local position column."""
    return (
        dcp_local_to_global(jnp.arange(n_local, dtype=jnp.int32), world, rank, interleave)
        // block_size
    )


def _exchange_top_c(
    local_max: jax.Array,
    global_rows: jax.Array,
    c: int,
    b: int,
    axis: str,
    implementation: Implementation,
    topk_algorithm: str | None,
) -> jax.Array:
    """The global top-C blocks from each device's local top-C, exactly.

    A block of the global top-C is in the local top-C of the device that holds its maximum: the
    blocks above it there are above it globally too (a global max is at least any local one), so
    fewer than C of them exist. The all-gathered pairs may name a block several times with
    different local maxima; the largest is its global max whenever the block can be chosen, and
    an underestimated block only ranks lower than it should among blocks that lose anyway.
    """
    local = select_candidate_blocks(
        local_max,
        global_rows,
        num_candidates=c,
        block_size=b,
        implementation=implementation,
        topk_algorithm=topk_algorithm,
    )  # ascending ids, -1 padded; the newest block is pinned on every device
    picked = jnp.take_along_axis(local_max, jnp.maximum(local, 0), axis=1)
    ids = lax.all_gather(jnp.where(local >= 0, local, INT32_MAX), axis, axis=1, tiled=True)
    scores = lax.all_gather(jnp.where(local >= 0, picked, -jnp.inf), axis, axis=1, tiled=True)
    # One entry per block: its largest gathered score (sort by id, then score key descending).
    ids, _, scores = lax.sort((ids, -score_keys(scores), scores), dimension=1, num_keys=2)
    first = jnp.pad(ids[:, 1:] != ids[:, :-1], ((0, 0), (1, 0)), constant_values=True)
    newest = (num_blocks(global_rows, b) - 1)[:, None]
    return ordered_select(scores, first & (ids != INT32_MAX), c, priority=ids == newest, ids=ids)


def dcp_publish(
    query: QueryBundle,
    cache: PagedIndexCache,
    block_table: jax.Array,
    global_context_lens: jax.Array,
    config: IndexerConfig,
    *,
    axis: str,
    interleave: int = 1,
    exchange: Literal["auto", "topc", "pmax"] = "auto",
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> tuple[jax.Array, CandidateTable]:
    """`publish` under decode context parallelism; call inside `shard_map` over `axis`.

    Args:
      query: the layer's queries (replicated over `axis`).
      cache, block_table: this device's own paged cache and page table of its local positions.
      global_context_lens: int `[batch]` request lengths in global positions (replicated);
        traced lengths clamp to the positions the devices hold together (`dcp_capacity` of the
        local page table's `max_pages · page_size`), as one device clamps to its page table.
        Row `j` of a request sees `L - next_n + 1 + j` global positions, of which each device
        scores its own share (every row passed to the logits kernel as its own request).
      interleave: I, positions per run on one device.
      exchange: how the candidate blocks are agreed. "topc" all-gathers each device's local
        top-C (block max, global id) pairs and re-selects (W·C pairs per row); "pmax" all-reduces
        every global block maximum (`ceil(L / B)` floats per row). Both are exact. "auto" takes
        "topc" when rows hold at least `TOPC_MIN_BLOCKS_PER_CANDIDATE`·C blocks
        (`dsv41_jax.plan.sharded`), else "pmax".
      implementation, topk_algorithm: as in `publish` (a single name is a preference every op
        shares: an op without it runs its own order).

    Returns:
      (top-k global positions, the table). `blocks` and `count` are global and identical on every
      device; `valid_lens` is the global sparse length; `physical` is -1 (a block's positions are
      spread over devices: each device maps them through its own page table).
    """
    interleave = _checks.positive_int(interleave, "interleave")
    dcp_exchange(exchange, 0, 1)  # checked before anything is traced
    implementation = shared(implementation)
    topk_algorithm = check_algorithm(topk_algorithm)
    _check_paged_config(config, query, cache)
    b = config.candidate_block_size
    world, rank, global_rows, local_rows, row_bt = _dcp_rows(
        query, cache, block_table, global_context_lens, axis, interleave, "dcp_publish"
    )
    logits = paged_mqa_logits(
        rows_as_requests(query), cache, local_rows, row_bt, implementation=implementation
    )
    indices = _dcp_topk(
        logits,
        local_rows,
        config.index_topk,
        None,
        axis,
        world,
        rank,
        interleave,
        implementation,
        topk_algorithm,
    )

    # Per-device maxima of every global block, then the cluster-wide max; both taken on
    # `score_keys` (a float max would flush denormal scores to zero on XLA's CPU backend).
    n_local = logits.shape[1]
    nb = -(-(n_local * world) // b)
    cols = jnp.arange(n_local, dtype=jnp.int32)
    visible = (cols[None] < local_rows[:, None]) & ~jnp.isnan(logits)
    vals = jnp.where(visible, logits, -jnp.inf)
    gblock = _local_global_blocks(n_local, world, rank, interleave, b)
    if interleave == 1 and b % world == 0:
        # Local block j // (B / W) is exactly this device's part of global block j // (B / W).
        # (ceil(n / (B / W)) local blocks: exactly the nb global blocks)
        local_max = block_amax(
            vals, local_rows, block_size=b // world, pin_newest=False, implementation=implementation
        )
    else:
        empty = score_keys(jnp.full((vals.shape[0], nb), -jnp.inf, jnp.float32))
        local_max = key_scores(empty.at[:, gblock].max(score_keys(vals), mode="drop"))
    c = config.candidate_topk_blocks
    decided = dcp_exchange(exchange, nb, c)
    agreed = decided.choice
    record("dcp_publish: exchange", agreed, plan=decided)
    if agreed == "pmax":
        global_max = key_scores(lax.pmax(score_keys(local_max), axis))
        newest = num_blocks(global_rows, b) - 1
        global_max = jnp.where(jnp.arange(nb)[None] == newest[:, None], jnp.inf, global_max)
        selected = select_candidate_blocks(
            global_max,
            global_rows,
            num_candidates=c,
            block_size=b,
            implementation=implementation,
            topk_algorithm=topk_algorithm,
        )
    else:
        selected = _exchange_top_c(
            local_max, global_rows, c, b, axis, implementation, topk_algorithm
        )
    pages = -(-(nb * b) // config.page_size)
    identity = jnp.broadcast_to(jnp.arange(pages, dtype=jnp.int32), (selected.shape[0], pages))
    table = sort_candidate_blocks(
        selected,
        global_rows,
        identity,
        block_size=b,
        page_size=config.page_size,
        implementation=implementation,
    )
    return indices, CandidateTable(
        table.blocks,
        table.count,
        table.valid_lens,
        jnp.full_like(table.physical, -1),
        block_size=table.block_size,
    )


def dcp_select(
    query: QueryBundle,
    cache: PagedIndexCache,
    block_table: jax.Array,
    global_context_lens: jax.Array,
    table: CandidateTable,
    config: IndexerConfig,
    *,
    axis: str,
    interleave: int = 1,
    path: Literal["auto", "mask", "sparse"] = "auto",
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> jax.Array:
    """`select` under DCP; call inside `shard_map` over `axis`.

    Each device takes the local top-k (global ids) of its positions inside the table's blocks;
    the all-gathered candidates are re-selected exactly. `path="mask"` scores every local
    position and masks; `path="sparse"` scores only the local part of the candidate blocks (a
    local table over this device's positions: blocks of B when I is a multiple of B, of B / W
    when B / I is a multiple of W, of single positions otherwise). `"auto"` takes the sparse
    path once `dsv41_jax.status` records it as device-verified ("dcp sparse path",
    docs/status.md) and the mask path until then. Every path returns the unsharded result
    bitwise. `implementation`, `topk_algorithm`: as in `dcp_publish`.
    """
    interleave = _checks.positive_int(interleave, "interleave")
    decided = dcp_route(path)  # checked before anything is traced
    implementation = shared(implementation)
    topk_algorithm = check_algorithm(topk_algorithm)
    _check_paged_config(config, query, cache)
    _check_table(table, query, config)
    b = config.candidate_block_size
    world, rank, global_rows, local_rows, row_bt = _dcp_rows(
        query, cache, block_table, global_context_lens, axis, interleave, "dcp_select"
    )
    rows_query, k = rows_as_requests(query), config.index_topk
    route = decided.choice
    declined = (("sparse", decided.reason),) if path == "auto" and route == "mask" else ()
    record("dcp_select: consumer path", route, declined, plan=decided)
    if route == "sparse":
        local = local_table(
            table,
            global_rows,
            local_rows,
            row_bt,
            world,
            rank,
            interleave,
            config.page_size,
            implementation,
        )
        logits = sparse_paged_mqa_logits(
            rows_query,
            cache,
            local,
            local_rows,
            row_bt,
            block_size=local.block_size,
            implementation=implementation,
        )
        columns = topk(
            logits,
            local.valid_lens,
            k,
            implementation=implementation,
            topk_algorithm=topk_algorithm,
        )
        picked = jnp.take_along_axis(logits, jnp.maximum(columns, 0), axis=1)
        positions = sparse_columns_to_positions(columns, local, local.block_size)
        return _merge_gathered(picked, positions, k, axis, world, rank, interleave)
    logits = paged_mqa_logits(rows_query, cache, local_rows, row_bt, implementation=implementation)
    gblock = _local_global_blocks(logits.shape[1], world, rank, interleave, b)  # the mask path
    member_blocks = candidate_member(table.blocks, -(-(logits.shape[1] * world) // b))
    member = jnp.take_along_axis(member_blocks, jnp.broadcast_to(gblock, logits.shape), axis=1)
    return _dcp_topk(
        logits, local_rows, k, member, axis, world, rank, interleave, implementation, topk_algorithm
    )


def _merge_gathered(
    scores: jax.Array,
    local: jax.Array,
    k: int,
    axis: str,
    world: int,
    rank: jax.Array,
    interleave: int,
) -> jax.Array:
    """All-gather each device's local top-k (scores, local positions; -1 padding) with global
    ids and re-select the k best exactly."""
    ids = dcp_local_to_global(local, world, rank, interleave)
    all_scores = lax.all_gather(jnp.where(local >= 0, scores, -jnp.inf), axis, axis=1, tiled=True)
    all_ids = lax.all_gather(ids, axis, axis=1, tiled=True)
    return _merge_topk(all_scores, all_ids, k)
