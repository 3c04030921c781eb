"""The fused Hopper indexer layers: each layer of a decode step as one custom call.

A layer's ops (paged logits, the exact select, block scores, the top-C blocks, the candidate
table, the sparse logits) run as the same kernels, in the same order and on the same data as
when they are called one by one, so the results are bitwise theirs; what changes is the host
work XLA does per step, which a serving loop pays on every call: one custom call a layer
instead of one per op, no pass that marks invalid pages (the kernel's out-of-bounds scale reads
are NaN), and DeepGEMM's schedule computed once per step for every layer that shares the
lengths (`Shared`). ffi/sm90_indexer_layers.cu holds the per-layer handlers, each
command-buffer compatible, so XLA captures them into the CUDA graphs of the jitted step that
calls them.

`publish` and `select` take these paths wherever every op of the layer would run its FFI kernel
(the plan's decision: `dsv41_jax.plan.layers`); the step API (`TwoLevelIndexer.decode_layer`)
computes the shared values once a step and hands them to every layer.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _ext
from dsv41_jax.config import IndexerConfig
from dsv41_jax.logits.api import logits_width
from dsv41_jax.plan import Spec, device_record, split_rows
from dsv41_jax.rows import clamp_lengths, row_block_table, row_lengths
from dsv41_jax.types import CandidateTable, PagedIndexCache, QueryBundle

SCHEDULE = "dsv41_sm90_paged_mqa_schedule"
DENSE_SELECT = "dsv41_sm90_dense_select"
PUBLISH = "dsv41_sm90_publish"
SPARSE_SELECT = "dsv41_sm90_sparse_select"


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Shared:
    """What every fused layer of one step shares: the lengths clamped to the page table, per
    request (`lens`) and per query row (`rows`), and DeepGEMM's schedule over them."""

    lens: jax.Array
    rows: jax.Array
    schedule: jax.Array

    @classmethod
    def of(cls, context_lens, block_table, page_size: int, next_n: int) -> Shared:
        lens = clamp_lengths(context_lens, block_table.shape[1] * page_size)
        return cls(lens, row_lengths(lens, next_n), schedule(lens, next_n))


def schedule(lens: jax.Array, next_n: int) -> jax.Array:
    """DeepGEMM's SM90 schedule ([257, 2] int32) of requests of `next_n` rows over `lens`."""
    out = jax.ShapeDtypeStruct((_ext.limit("sm90_schedule_rows"), 2), jnp.int32)
    return jax.ffi.ffi_call(SCHEDULE, out, vmap_method="sequential")(lens, next_n=np.int32(next_n))


def _select_attr(select: str) -> np.int32:
    """A CUDA select's name as the handlers' `select` attribute."""
    return np.int32(_ext.limit(f"select_{select}"))


def _split_workspace(logits: jax.ShapeDtypeStruct, k: int, masked: bool = False):
    """The layer's top-k's split-rows workspace (uint32 words): `LIMITS["filter_split_row_words"]`
    a row where the plan splits its rows (`dsv41_jax.plan.split_rows`; the layer's select is
    then the filter select, `LayerPlan.selects`), else one word (no split)."""
    rows, width = logits.shape
    spec = Spec("topk", rows, width, "float32", k)
    splits = not masked and split_rows(spec, device_record()) is not None
    words = rows * _ext.limit("filter_split_row_words") if splits else 1
    return jax.ShapeDtypeStruct((words,), jnp.uint32)


def _logits_shape(query: QueryBundle, cache: PagedIndexCache, block_table) -> jax.ShapeDtypeStruct:
    width = logits_width(block_table.shape[1], cache.page_size)
    return jax.ShapeDtypeStruct((query.num_rows, width), jnp.float32)


def dense_select(
    query: QueryBundle,
    cache: PagedIndexCache,
    block_table,
    shared: Shared,
    k: int,
    members: jax.Array | None = None,
    block_size: int = 8,
    *,
    select: str,
) -> jax.Array:
    """The top-k of a layer's dense logits (inside `members`' blocks when given): int32
    `[rows, k]`, through the CUDA select `select` (the layer plan's,
    `dsv41_jax.plan.layers.LayerPlan.selects`)."""
    logits = _logits_shape(query, cache, block_table)
    has_members = members is not None
    out = (
        jax.ShapeDtypeStruct((query.num_rows, k), jnp.int32),
        logits,
        _split_workspace(logits, k, masked=has_members),
    )
    selected, *_ = jax.ffi.ffi_call(DENSE_SELECT, out, vmap_method="sequential")(
        query.values,
        query.weights,
        cache.data,
        shared.lens,
        shared.rows,
        _checks.int32(block_table),
        shared.schedule,
        _checks.int32(members) if has_members else _checks.UNREAD_TABLE,
        k=np.int32(k),
        select=_select_attr(select),
        block_size=np.int32(block_size),
        has_members=has_members,
    )
    return selected


def _publish_workspaces(
    rows: int,
    logits: jax.ShapeDtypeStruct,
    config: IndexerConfig,
    all_blocks: bool,
):
    """(block-score workspace, top-C workspace) of a publish over these logits: when the
    table is every block of each row (`all_blocks`, the plan's decision), `[1, 1]`
    placeholders (no block scores, no top-C)."""
    b, c = config.candidate_block_size, config.candidate_topk_blocks
    if all_blocks:
        return jax.ShapeDtypeStruct((1, 1), jnp.float32), jax.ShapeDtypeStruct((1, 1), jnp.int32)
    nb = -(-logits.shape[1] // b)
    return (
        jax.ShapeDtypeStruct((rows, nb), jnp.float32),
        jax.ShapeDtypeStruct((rows, c), jnp.int32),
    )


def _table_shapes(rows: int, c: int) -> tuple[jax.ShapeDtypeStruct, ...]:
    """blocks, count, valid_lens, physical of a published table."""
    i32 = jnp.int32
    return (
        jax.ShapeDtypeStruct((rows, c), i32),
        jax.ShapeDtypeStruct((rows,), i32),
        jax.ShapeDtypeStruct((rows,), i32),
        jax.ShapeDtypeStruct((rows, c), i32),
    )


def publish(
    query: QueryBundle,
    cache: PagedIndexCache,
    block_table,
    shared: Shared,
    config: IndexerConfig,
    all_blocks: bool,
    select: str,
    select_c: str | None,
) -> tuple[jax.Array, CandidateTable]:
    """The candidate source layer: its top-k and the published table (see indexer.publish);
    `all_blocks`: the table is every block of each row; `select`, `select_c`: the CUDA selects
    of its top-k and of the top-C blocks (None with `all_blocks`). The layer plan's decisions
    (`dsv41_jax.plan.layers.LayerPlan`)."""
    rows, k = query.num_rows, config.index_topk
    b, c = config.candidate_block_size, config.candidate_topk_blocks
    logits = _logits_shape(query, cache, block_table)
    scores_ws, selected_ws = _publish_workspaces(rows, logits, config, all_blocks)
    out = (
        jax.ShapeDtypeStruct((rows, k), jnp.int32),
        *_table_shapes(rows, c),
        logits,
        scores_ws,
        selected_ws,
        _split_workspace(logits, k),
    )
    bt = _checks.int32(block_table)
    results = jax.ffi.ffi_call(PUBLISH, out, vmap_method="sequential")(
        query.values,
        query.weights,
        cache.data,
        shared.lens,
        shared.rows,
        bt,
        row_block_table(bt, query.next_n),
        shared.schedule,
        k=np.int32(k),
        select=_select_attr(select),
        select_c=_select_attr(select_c or "short"),  # unused with all_blocks
        block_size=np.int32(b),
        page_size=np.int32(cache.page_size),
        all_blocks=all_blocks,
    )
    indices, blocks, count, valid_lens, physical = results[:5]
    return indices, CandidateTable(blocks, count, valid_lens, physical, block_size=b)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SparseShared:
    """What the sparse consumers of one table share: its row lengths clamped to the sparse
    row."""

    lens: jax.Array

    @classmethod
    def of(cls, table: CandidateTable) -> SparseShared:
        c = table.physical.shape[1]
        return cls(clamp_lengths(table.valid_lens, c * table.block_size))


def _sparse_workspaces(rows: int, c: int, b: int, k: int):
    """The sparse row's logits and the chosen columns of a sparse select."""
    return (
        jax.ShapeDtypeStruct((rows, c * b), jnp.float32),
        jax.ShapeDtypeStruct((rows, k), jnp.int32),
    )


def sparse_select(
    query: QueryBundle,
    cache: PagedIndexCache,
    table: CandidateTable,
    shared: SparseShared,
    k: int,
    select: str,
) -> jax.Array:
    """A consumer's top-k over its candidate blocks only (the sparse row), as positions,
    through `select` ("onchip", or a CUDA select after the sparse logits: the layer plan's,
    `dsv41_jax.plan.sparse_select`)."""
    rows, c = table.physical.shape
    b = table.block_size
    logits, columns = _sparse_workspaces(rows, c, b, k)
    out = (jax.ShapeDtypeStruct((rows, k), jnp.int32), logits, columns)
    positions, *_ = jax.ffi.ffi_call(SPARSE_SELECT, out, vmap_method="sequential")(
        query.values,
        query.weights,
        cache.data,
        _checks.int32(table.physical),
        _checks.int32(table.blocks),
        shared.lens,
        k=np.int32(k),
        select=_select_attr(select),
        block_size=np.int32(b),
    )
    return positions
