"""The fused Hopper indexer layers: each layer of a decode step as one custom call.

A layer's ops (paged logits, the exact select, block scores, the top-C blocks, the candidate
table, the candidate gather) run as the same kernels, in the same order and on the same data as
when they are called one by one, so the results are bitwise theirs; what changes is the host
work XLA does per step, which a serving loop pays on every call: one custom call a layer
instead of one per op, no pass that marks invalid pages (the kernel's out-of-bounds scale reads
are NaN), and DeepGEMM's schedule computed once per step for every layer that shares the
lengths (`Shared`). ffi/sm90_indexer_layers.cu holds the handlers.

`publish` and `select` take these paths wherever every op of the layer would run its FFI
kernel (`declines` says why not); the step API computes the shared values once.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks, _ext
from dsv41_jax.config import IndexerConfig
from dsv41_jax.logits import ffi as logits_ffi
from dsv41_jax.logits.api import logits_width
from dsv41_jax.ordering import every_block
from dsv41_jax.rows import clamp_lengths, row_block_table, row_lengths
from dsv41_jax.topk import ffi as topk_ffi
from dsv41_jax.types import CandidateTable, PagedIndexCache, QueryBundle

SCHEDULE = "dsv41_sm90_paged_mqa_schedule"
DENSE_SELECT = "dsv41_sm90_dense_select"
PUBLISH = "dsv41_sm90_publish"
SPARSE_SELECT = "dsv41_sm90_sparse_select"

_enabled = True


@contextlib.contextmanager
def unfused() -> Iterator[None]:
    """Within the block, layers traced through `publish` / `select` run op by op (the benchmark
    times both; results are identical). Acts at trace time; not for serving code."""
    global _enabled
    previous, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = previous


def declines(query: QueryBundle, cache: PagedIndexCache, block_table, implementation) -> str | None:
    """Why a layer over these inputs does not run fused (None: it does). It does where its ops
    would all run their FFI kernels: `implementation` None or preferring "ffi", an SM90 GPU,
    the inputs DeepGEMM's paged kernel takes."""
    if not _enabled:
        return "unfused() is active"
    if implementation is not None and implementation[0] != "ffi":
        return f"implementation {implementation!r} does not prefer 'ffi'"
    try:
        _ext.require_gpu("the fused layers", _ext.SM90)
    except _ext.ExtensionUnavailable as e:
        return str(e)
    max_pages = block_table.shape[1]
    return logits_ffi.sm90_paged_declines(
        query, cache, max_pages, logits_width(max_pages, cache.page_size)
    )


@dataclasses.dataclass(frozen=True)
class Shared:
    """What every layer of one step shares: the lengths clamped to the page table, per request
    (`lens`) and per query row (`rows`), and DeepGEMM's schedule over them."""

    lens: jax.Array
    rows: jax.Array
    schedule: jax.Array

    @classmethod
    def of(cls, context_lens, block_table, cache: PagedIndexCache, next_n: int) -> Shared:
        lens = clamp_lengths(context_lens, block_table.shape[1] * cache.page_size)
        return cls(lens, row_lengths(lens, next_n), schedule(lens, next_n))


def schedule(lens: jax.Array, next_n: int) -> jax.Array:
    """DeepGEMM's SM90 schedule ([257, 2] int32) of requests of `next_n` rows over `lens`."""
    out = jax.ShapeDtypeStruct((_ext.limit("sm90_schedule_rows"), 2), jnp.int32)
    return jax.ffi.ffi_call(SCHEDULE, out, vmap_method="sequential")(lens, next_n=np.int32(next_n))


def _select_attr(algorithm: str) -> np.int32:
    return np.int32(_ext.limit(f"select_{algorithm}"))


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
) -> jax.Array:
    """The top-k of a layer's dense logits (inside `members`' blocks when given): int32
    `[rows, k]`."""
    logits = _logits_shape(query, cache, block_table)
    algorithm = topk_ffi.algorithm_for(logits, k, members, block_size)
    has_members = members is not None
    if members is None:  # a dummy column, never read
        members = jnp.zeros((query.num_rows, 1), jnp.int32)
    out = (jax.ShapeDtypeStruct((query.num_rows, k), jnp.int32), logits)
    selected, _ = jax.ffi.ffi_call(DENSE_SELECT, out, vmap_method="sequential")(
        query.values,
        query.weights,
        cache.data,
        shared.lens,
        shared.rows,
        _checks.int32(block_table),
        shared.schedule,
        _checks.int32(members),
        k=np.int32(k),
        select=_select_attr(algorithm),
        block_size=np.int32(block_size),
        has_members=has_members,
    )
    return selected


def publish(
    query: QueryBundle, cache: PagedIndexCache, block_table, shared: Shared, config: IndexerConfig
) -> tuple[jax.Array, CandidateTable]:
    """The candidate source layer: its top-k and the published table (see indexer.publish)."""
    rows, k = query.num_rows, config.index_topk
    b, c = config.candidate_block_size, config.candidate_topk_blocks
    logits = _logits_shape(query, cache, block_table)
    nb = -(-logits.shape[1] // b)
    all_blocks = nb <= c  # every block of every row is a candidate: no block scores, no top-C
    i32, f32 = jnp.int32, jnp.float32
    if all_blocks:
        all_selected = every_block(shared.rows, c, b)
        scores_ws, selected_ws = (
            jax.ShapeDtypeStruct((1, 1), f32),
            jax.ShapeDtypeStruct((1, 1), i32),
        )
        select_c = "short"  # unused
    else:
        all_selected = jnp.zeros((1, 1), i32)  # unused
        scores_ws, selected_ws = (
            jax.ShapeDtypeStruct((rows, nb), f32),
            jax.ShapeDtypeStruct((rows, c), i32),
        )
        select_c = topk_ffi.algorithm_for(scores_ws, c, None, b)
    out = (
        jax.ShapeDtypeStruct((rows, k), i32),
        jax.ShapeDtypeStruct((rows, c), i32),
        jax.ShapeDtypeStruct((rows,), i32),
        jax.ShapeDtypeStruct((rows,), i32),
        jax.ShapeDtypeStruct((rows, c), i32),
        logits,
        scores_ws,
        selected_ws,
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
        all_selected,
        k=np.int32(k),
        select=_select_attr(topk_ffi.algorithm_for(logits, k, None, b)),
        select_c=_select_attr(select_c),
        block_size=np.int32(b),
        page_size=np.int32(cache.page_size),
        all_blocks=all_blocks,
    )
    indices, blocks, count, valid_lens, physical = results[:5]
    return indices, CandidateTable(blocks, count, valid_lens, physical, block_size=b)


@dataclasses.dataclass(frozen=True)
class SparseShared:
    """What the sparse consumers of one table share: its row lengths clamped to the sparse
    row, DeepGEMM's schedule over them (one query row per compact request) and the compact
    cache's page table."""

    lens: jax.Array
    schedule: jax.Array
    compact_table: jax.Array

    @classmethod
    def of(cls, table: CandidateTable) -> SparseShared:
        rows, c = table.physical.shape
        lens = clamp_lengths(table.valid_lens, c * table.block_size)
        pages = c // 8  # 8 blocks of 8 per 64-token page
        compact = jnp.arange(rows * pages, dtype=jnp.int32).reshape(rows, pages)
        return cls(lens, schedule(lens, 1), compact)


def sparse_select(
    query: QueryBundle,
    cache: PagedIndexCache,
    table: CandidateTable,
    shared: SparseShared,
    k: int,
) -> jax.Array:
    """A consumer's top-k over its candidate blocks only (the sparse row), as positions."""
    rows, c = table.physical.shape
    b = table.block_size
    logits = jax.ShapeDtypeStruct((rows, c * b), jnp.float32)
    out = (
        jax.ShapeDtypeStruct((rows, k), jnp.int32),
        jax.ShapeDtypeStruct((rows * c // 8, 64, 1, cache.data.shape[3]), jnp.uint8),
        logits,
        jax.ShapeDtypeStruct((rows, k), jnp.int32),
    )
    positions, *_ = jax.ffi.ffi_call(SPARSE_SELECT, out, vmap_method="sequential")(
        query.values,
        query.weights,
        cache.data,
        _checks.int32(table.physical),
        _checks.int32(table.blocks),
        shared.lens,
        shared.compact_table,
        shared.schedule,
        k=np.int32(k),
        select=_select_attr(topk_ffi.algorithm_for(logits, k, None, b)),
        block_size=np.int32(b),
    )
    return positions
