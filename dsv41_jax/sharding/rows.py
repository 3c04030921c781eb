"""Row sharding (tensor parallel): the indexer is replicated; each device selects a contiguous,
equal slice of the requests and an all-gather rebuilds the full outputs (`publish_row_sharded` /
`select_row_sharded` wrap the `shard_map` themselves), bitwise the unsharded result."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Literal

import jax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from dsv41_jax._dispatch import Implementation, record, shared
from dsv41_jax.config import IndexerConfig
from dsv41_jax.indexer import _check_paged_config, _check_table, publish, select
from dsv41_jax.plan import check_algorithm
from dsv41_jax.plan.sharded import row_sharding
from dsv41_jax.types import CandidateTable, PagedIndexCache, QueryBundle

logger = logging.getLogger("dsv41_jax")


def _row_sharded(
    fn: Callable[..., Any], mesh: Mesh, axis: str, batch: int, args: tuple[Any, ...]
) -> Any:
    """Run `fn(*args)` on each device's request slice and all-gather the outputs (axis 0).

    The public entry points call it under `jax.jit`, so the shard_map is traced once rather
    than run primitive by primitive as an eager shard_map is."""
    if axis not in mesh.axis_names:
        hint = " (pass the axis name as a str, not a tuple)" if isinstance(axis, tuple) else ""
        raise ValueError(
            f"axis {axis!r} is not one of the mesh's axis names {mesh.axis_names}{hint}"
        )
    world = mesh.shape[axis]
    decided = row_sharding(batch, world)
    record("row sharding", decided.choice, plan=decided)
    if decided.choice == "replicated":
        if world > 1:
            logger.warning(
                "row sharding: %d requests do not divide over %d devices of axis %r; "
                "running replicated",
                batch,
                world,
                axis,
            )
        replicated = NamedSharding(mesh, P())
        return jax.tree.map(lambda x: lax.with_sharding_constraint(x, replicated), fn(*args))
    per = batch // world

    def body(*local_args: Any) -> Any:
        start = lax.axis_index(axis) * per
        sliced = jax.tree.map(lambda x: lax.dynamic_slice_in_dim(x, start, per, 0), local_args[0])
        out = fn(sliced, *local_args[1:])
        return jax.tree.map(lambda x: lax.all_gather(x, axis, axis=0, tiled=True), out)

    per_request, shared = args[0], args[1:]
    specs = (
        jax.tree.map(lambda _: P(), per_request),
        *[jax.tree.map(lambda _: P(), a) for a in shared],
    )
    return jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False)(
        per_request, *shared
    )


def publish_row_sharded(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    config: IndexerConfig,
    *,
    mesh: Mesh,
    axis: str,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> tuple[jax.Array, CandidateTable]:
    """`publish` with the requests split over mesh axis `axis` (replicated inputs and outputs).

    Each device selects `batch / W` contiguous requests (all their `next_n` rows); one all-gather
    rebuilds the top-k and the table. Falls back to replicated, with a log line, when the requests
    do not divide. `implementation`, `topk_algorithm`: as in `publish` (static).
    """
    options = (
        ("implementation", shared(implementation)),
        ("topk_algorithm", check_algorithm(topk_algorithm)),
    )
    return _jit_row_sharded(
        publish, query, cache, context_lens, block_table, (), config, mesh, axis, options
    )


def select_row_sharded(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    table: CandidateTable,
    config: IndexerConfig,
    *,
    mesh: Mesh,
    axis: str,
    path: Literal["auto", "mask", "sparse"] = "auto",
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> jax.Array:
    """`select` with the requests split over mesh axis `axis` (see `publish_row_sharded`;
    `path`, `implementation`, `topk_algorithm`: as in `select`)."""
    _check_paged_config(config, query, cache)
    _check_table(table, query, config)  # before its rows are split per request
    options = (
        ("path", path),
        ("implementation", shared(implementation)),
        ("topk_algorithm", check_algorithm(topk_algorithm)),
    )
    return _jit_row_sharded(
        select, query, cache, context_lens, block_table, (table,), config, mesh, axis, options
    )


@functools.partial(jax.jit, static_argnums=(0, 6, 7, 8, 9))
def _jit_row_sharded(
    op: Callable[..., Any],
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    tables: tuple[CandidateTable, ...],
    config: IndexerConfig,
    mesh: Mesh,
    axis: str,
    options: tuple[tuple[str, Any], ...],
) -> Any:
    """`op(query, cache, context_lens, block_table, *tables, config, **dict(options))` (`publish`
    or `select`) on each device's slice of the requests (`_row_sharded`), under `jax.jit`: the
    rows of `tables` are split with their requests."""
    n = query.next_n
    rows_tables = jax.tree.map(lambda x: x.reshape(query.batch, n, *x.shape[1:]), tables)

    def fn(per_request: tuple[Any, ...], cache: PagedIndexCache) -> Any:
        q, lens, bt, tbls = per_request
        tbls = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), tbls)
        return op(q, cache, lens, bt, *tbls, config, **dict(options))

    per_request = (query, context_lens, block_table, rows_tables)
    return _row_sharded(fn, mesh, axis, query.batch, (per_request, cache))
