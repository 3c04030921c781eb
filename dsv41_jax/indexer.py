"""The two-level V4.1 indexer: `publish` (candidate source layer) and `select` (consumers).

Ordering between layers comes from data dependencies only: a consumer reads the CandidateTable
that `publish` returned, so XLA schedules it after the source layer; nothing else is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from dsv41_jax import _checks, fused
from dsv41_jax._dispatch import Implementation, shared
from dsv41_jax.blocks import block_amax, sort_candidate_blocks
from dsv41_jax.config import IndexerConfig
from dsv41_jax.logits import mqa_logits, paged_mqa_logits, sparse_paged_mqa_logits
from dsv41_jax.logits.api import check_paged, check_ragged
from dsv41_jax.ordering import every_block
from dsv41_jax.plan import check_algorithm
from dsv41_jax.plan.layers import LayerPlan, LayerSpec, Path, Role, every_block_table, plan_layer
from dsv41_jax.rows import prefill_lengths, row_block_table, row_lengths
from dsv41_jax.topk.api import select_candidate_blocks, sparse_columns_to_positions, topk
from dsv41_jax.types import CandidateTable, KeyBuffer, PagedIndexCache, QueryBundle


def _check_config(config: IndexerConfig, query: QueryBundle, head_dim: int, fmt: str) -> None:
    if not isinstance(config, IndexerConfig):
        raise ValueError(f"config must be an IndexerConfig, got {type(config).__name__}")
    if not isinstance(query, QueryBundle):
        raise ValueError(
            f"query must be a QueryBundle (make one with dsv41_jax.quantize_queries), got "
            f"{type(query).__name__}"
        )
    query.check_one_layer("query")  # before its shape is read as [batch, next_n, H, D]
    checks = (
        ("num_heads", query.num_heads),
        ("head_dim", head_dim),
        ("cache_format", fmt),
        ("next_n", query.next_n),
    )
    for field, got in checks:
        if getattr(config, field) != got:
            raise ValueError(
                f"config.{field} is {getattr(config, field)!r} but the inputs have {got!r}"
            )


def _check_paged_config(config: IndexerConfig, query: QueryBundle, cache: PagedIndexCache) -> None:
    if not isinstance(cache, PagedIndexCache):
        raise ValueError(f"cache must be a PagedIndexCache, got {type(cache).__name__}")
    cache.check_one_layer("cache")
    _check_config(config, query, cache.head_dim, cache.format)
    if config.page_size != cache.page_size:
        raise ValueError(
            f"config.page_size is {config.page_size} but the cache pages hold {cache.page_size}"
        )


def _capacity(block_table: jax.Array, cache: PagedIndexCache) -> int:
    """Positions a request's page table holds: traced lengths clamp to it (`rows.row_lengths`)."""
    return block_table.shape[1] * cache.page_size


def _check_table(table: CandidateTable, query: QueryBundle, config: IndexerConfig) -> None:
    """A consumer's table: a CandidateTable of the query's rows, published with the config's
    block size."""
    if not isinstance(table, CandidateTable):
        raise ValueError(f"table must be a CandidateTable, got {type(table).__name__}")
    table.check_arrays(None, "table")
    if table.num_rows != query.num_rows:
        raise ValueError(f"table has {table.num_rows} rows but the query has {query.num_rows}")
    table.check_block_size(config.candidate_block_size, "config.candidate_block_size")
    if table.num_candidates != config.candidate_topk_blocks:
        raise ValueError(
            f"config.candidate_topk_blocks is {config.candidate_topk_blocks} but the table holds "
            f"{table.num_candidates} blocks per row: a consumer must use the publisher's config"
        )


def _publish_from_logits(
    logits: jax.Array,
    lens: jax.Array,
    bt: jax.Array,
    config: IndexerConfig,
    implementation: Implementation,
    topk_algorithm: str | None = None,
    all_blocks: bool | None = None,
) -> tuple[jax.Array, CandidateTable]:
    """A source layer's top-k and table from its logits; `all_blocks`: the plan's every-block
    decision (`dsv41_jax.plan.layers.every_block_table` of the logits' width when None)."""
    b, c = config.candidate_block_size, config.candidate_topk_blocks
    if all_blocks is None:
        all_blocks = every_block_table(logits.shape[1], c, b)[0]
    indices = topk(
        logits,
        lens,
        config.index_topk,
        implementation=implementation,
        topk_algorithm=topk_algorithm,
    )
    if all_blocks:
        # No row can have more than C blocks, so every block is a candidate: exactly what
        # select_candidate_blocks returns then (ascending ids, -1 padded).
        selected = every_block(jnp.minimum(lens, logits.shape[1]), c, b)
    else:
        scores = block_amax(logits, lens, block_size=b, implementation=implementation)
        selected = select_candidate_blocks(
            scores,
            lens,
            num_candidates=c,
            block_size=b,
            implementation=implementation,
            topk_algorithm=topk_algorithm,
        )
    table = sort_candidate_blocks(
        selected, lens, bt, block_size=b, page_size=config.page_size, implementation=implementation
    )
    return indices, table


def publish(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    config: IndexerConfig,
    *,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
    fuse: bool = True,
) -> tuple[jax.Array, CandidateTable]:
    """The candidate source layer of a decode step.

    Scores every visible position (dense paged MQA logits), selects its own top-k, and publishes
    the `C` best blocks of `B` positions (newest block pinned) as a CandidateTable.

    Args:
      query: `[batch, next_n, H, D]` QueryBundle (next_n > 1 for speculative verify rows).
      cache: the layer's paged index cache.
      context_lens: int `[batch]` request lengths; block_table: int `[batch, max_pages]`.
      config: the IndexerConfig (checked against the inputs).
      implementation: None (every op's fastest available), a name, or a preference order; an
        op that lacks a named implementation runs its own order (e.g. "pallas" runs the Pallas
        top-k and block amax, and the FFI logits, which have no Pallas version).
      topk_algorithm: the CUDA select to run wherever it takes a call (as in `topk`; the
        fused layer's selects too); None: the plan's (`dsv41_jax.plan`).
      fuse: False runs the layer op by op even where it could run as one custom call (the
        fused layer, `dsv41_jax.fused`; bitwise the same results: for benchmarks and tests).
        Static: a jitted function traced with one value is traced again with the other.

    Returns:
      (int32 `[batch·next_n, k]` top-k logical positions, ascending, -1 padded; the table).
    """
    _check_paged_config(config, query, cache)
    context_lens = _checks.array(context_lens, "context_lens")
    block_table = _checks.array(block_table, "block_table")
    topk_algorithm = check_algorithm(topk_algorithm)
    lp = _layer_plan(
        "source", query, cache, block_table, config, implementation, fuse, topk_algorithm
    )
    return _publish(query, cache, context_lens, block_table, config, lp, topk_algorithm)


def _layer_plan(
    role: Role,
    query: QueryBundle,
    cache: PagedIndexCache,
    block_table: jax.Array,
    config: IndexerConfig,
    implementation: Implementation,
    fuse: bool,
    topk_algorithm: str | None,
    path: Path = "auto",
) -> LayerPlan:
    """The plan of a layer called on its own (`publish`, `select`, `select_plain`): `fuse`
    False runs it op by op by request."""
    unfused = None if _checks.boolean(fuse, "fuse") else "fuse=False, as asked"
    spec = LayerSpec.of(role, query, cache, block_table, config)
    return plan_layer(
        spec,
        path=path,
        implementation=implementation,
        unfused=unfused,
        topk_algorithm=topk_algorithm,
    )


def _run_fused(
    lp: LayerPlan,
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
) -> bool:
    """Records the layer's plan (for `dsv41_jax.info`) and says whether it runs fused; a fused
    layer's inputs are checked as `paged_mqa_logits` would check them, since it skips that op."""
    lp.record()
    if lp.fused:
        check_paged(query, cache, context_lens, block_table)
    return lp.fused


def _publish(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    config: IndexerConfig,
    lp: LayerPlan,
    topk_algorithm: str | None = None,
    share: fused.Shared | None = None,
) -> tuple[jax.Array, CandidateTable]:
    """`publish` on checked inputs, as its plan `lp` says; `share`: the step's lengths and
    schedule (fused layers)."""
    if _run_fused(lp, query, cache, context_lens, block_table):
        share = share or fused.Shared.of(context_lens, block_table, cache.page_size, query.next_n)
        return fused.publish(
            query,
            cache,
            block_table,
            share,
            config,
            lp.every_block,
            lp.top_select,
            lp.blocks_select,
        )
    impl = lp.implementation
    logits = paged_mqa_logits(query, cache, context_lens, block_table, implementation=impl)
    lens = row_lengths(context_lens, query.next_n, _capacity(block_table, cache))
    bt = row_block_table(block_table, query.next_n)
    return _publish_from_logits(logits, lens, bt, config, impl, topk_algorithm, lp.every_block)


def select(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    table: CandidateTable,
    config: IndexerConfig,
    *,
    path: Path = "auto",
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
    fuse: bool = True,
) -> jax.Array:
    """A consumer layer of a decode step: top-k inside the published candidate blocks.

    `path="mask"` scores every position densely and fuses the candidate mask into the top-k;
    `path="sparse"` scores only the candidate blocks (the sparse row: `C·B` positions whatever
    the context length) and maps the chosen columns back to positions. Both return identical
    results: the sparse kernels compute each logit exactly as the dense ones do.
    `path="auto"` (the default) takes the sparse path where this GPU has a sparse logits kernel
    for the inputs (SM90 with the fp8 cache, SM100 with mxfp4; `docs/sparse_consumer.md`) and
    the mask path elsewhere (the CPU reference included). When the page table holds at most
    `C·B` positions per row (the sparse row would be the whole row), it takes the mask path
    under 64 query rows and the sparse path from 64 (faster there;
    `dsv41_jax.plan.layers.TABLE_SPARSE_MIN_ROWS`). It always selects inside the table it is
    given. The step API (`TwoLevelIndexer.decode`) publishes its
    table from the same lengths and page table, so there every block is provably a candidate:
    its consumers take the sparse path from 8 query rows where this GPU has its kernel (faster
    there; `dsv41_jax.plan.layers.OWN_TABLE_SPARSE_MIN_ROWS`), the plain dense top-k otherwise.
    `path="sparse"` on a GPU without such a kernel raises ValueError rather than running the
    slow sparse reference there.

    Any table is read by its `blocks` alone: the mask path takes every block id in
    `[0, nblocks)` of the row (repeats once, others ignored), and the sparse path rebuilds the
    table from those blocks first (`sort_candidate_blocks` with this call's lengths and page
    table: one small kernel), so a hand-made or edited table gives both paths, and "auto", the
    same answer. The step (`TwoLevelIndexer.decode`) reads the table it just published as is.
    `implementation`, `topk_algorithm` and `fuse`: as in `publish`; a forced select other than
    "onchip" gives the SM90 sparse consumer its logits-then-select form.

    Raises:
      ValueError: bad inputs, a config that does not match them, or a table published with
        another block size than `config.candidate_block_size`.

    Returns int32 `[batch·next_n, k]` logical positions, ascending, -1 padded.
    """
    _check_paged_config(config, query, cache)
    context_lens = _checks.array(context_lens, "context_lens")
    block_table = _checks.array(block_table, "block_table")
    _check_table(table, query, config)
    topk_algorithm = check_algorithm(topk_algorithm)
    lp = _layer_plan(
        "consumer", query, cache, block_table, config, implementation, fuse, topk_algorithm, path
    )
    return _select(query, cache, context_lens, block_table, table, config, lp, topk_algorithm)


def _select(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    table: CandidateTable,
    config: IndexerConfig,
    lp: LayerPlan,
    topk_algorithm: str | None,
    *,
    share: fused.Shared | None = None,
    sparse_share: fused.SparseShared | None = None,
) -> jax.Array:
    """A consumer layer on checked inputs, as its plan `lp` says (`select`, and the step's
    consumers: `lp.spec.own_table`, the table is the one the step just published from the same
    lengths and page table, read as is); `share` / `sparse_share`: the step's lengths,
    schedule and sparse rows' lengths for the fused layers (computed here when None)."""
    k, b = config.index_topk, config.candidate_block_size
    implementation = lp.implementation
    if lp.route == "dense":
        return _dense_select(query, cache, context_lens, block_table, k, lp, topk_algorithm, share)
    if lp.route == "sparse" and not lp.spec.own_table:
        # A table from anywhere (hand-made, edited, published for other lengths): the sparse
        # row is read through count, valid_lens and physical, which the mask path ignores, and
        # a repeated block or one outside the row would name a position twice or one that is
        # not visible. Rebuilt from its blocks for these rows (ids outside [0, nblocks) and
        # repeats dropped), it names exactly the positions the mask path selects among, in the
        # layout every sparse kernel reads.
        table = sort_candidate_blocks(
            table.blocks,
            row_lengths(context_lens, query.next_n, _capacity(block_table, cache)),
            row_block_table(block_table, query.next_n),
            block_size=b,
            page_size=cache.page_size,
            implementation=implementation,
        )
    if _run_fused(lp, query, cache, context_lens, block_table):
        if lp.route == "sparse":
            sparse_share = sparse_share or fused.SparseShared.of(table)
            return fused.sparse_select(query, cache, table, sparse_share, k, lp.top_select)
        share = share or fused.Shared.of(context_lens, block_table, cache.page_size, query.next_n)
        return fused.dense_select(
            query, cache, block_table, share, k, table.blocks, b, select=lp.top_select
        )
    if lp.route == "mask":
        logits = paged_mqa_logits(
            query, cache, context_lens, block_table, implementation=implementation
        )
        lens = row_lengths(context_lens, query.next_n, _capacity(block_table, cache))
        return topk(
            logits,
            lens,
            k,
            candidates=table,
            block_size=b,
            implementation=implementation,
            topk_algorithm=topk_algorithm,
        )
    logits = sparse_paged_mqa_logits(
        query,
        cache,
        table,
        context_lens,
        block_table,
        block_size=b,
        implementation=implementation,
    )
    columns = topk(
        logits,
        table.valid_lens,
        k,
        implementation=implementation,
        topk_algorithm=topk_algorithm,
    )
    return sparse_columns_to_positions(columns, table, b)


def by_row_chunks(fn: Callable[..., Any], row_chunk: int | None, *row_args: Any) -> Any:
    """`fn(*row_args)` computed over chunks of `row_chunk` query rows, one chunk after another
    (`lax.map`), so only one chunk's `[row_chunk, T]` logits are alive at a time; the results
    are concatenated along rows. Every leaf of `row_args` and of the result has the rows first.
    The last chunk is padded with empty rows (zeros; `starts == ends == 0`), which select
    nothing. Rows are independent, so the result equals `fn(*row_args)` exactly."""
    rows = jax.tree.leaves(row_args)[0].shape[0]
    if row_chunk is None or rows <= row_chunk:
        return fn(*row_args)
    chunks = -(-rows // row_chunk)
    pad = chunks * row_chunk - rows

    def split(x: jax.Array) -> jax.Array:
        x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
        return x.reshape(chunks, row_chunk, *x.shape[1:])

    out = jax.lax.map(lambda a: fn(*a), jax.tree.map(split, row_args))
    return jax.tree.map(lambda x: x.reshape(chunks * row_chunk, *x.shape[2:])[:rows], out)


def _row_chunk(row_chunk: int | None) -> int | None:
    return None if row_chunk is None else _checks.positive_int(row_chunk, "row_chunk")


def publish_prefill(
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    config: IndexerConfig,
    *,
    row_chunk: int | None = None,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> tuple[jax.Array, CandidateTable]:
    """`publish` for ragged prefill rows: row `i` sees packed keys `[starts[i], ends[i])`.

    Positions and block ids are relative to `starts[i]`. There is no page table: `physical`
    equals `blocks` (with -1 padding), i.e. the identity page mapping of the relative positions.
    The logits are `[rows, T]` float32 (64 GiB for 128K rows over 128K keys): `row_chunk`
    scores and selects that many rows at a time instead (same result, one chunk's logits in
    memory). `implementation`, `topk_algorithm`: as in `publish`.
    """
    starts, ends = check_ragged(query, keys, starts, ends)  # keys a KeyBuffer before it is read
    _check_config(config, query, keys.head_dim, keys.format)
    implementation = shared(implementation)
    topk_algorithm = check_algorithm(topk_algorithm)

    def run(q: QueryBundle, s: jax.Array, e: jax.Array) -> tuple[jax.Array, CandidateTable]:
        # Relative layout: row i's position p sits at column p, as the selection contract counts.
        logits = mqa_logits(q, keys, s, e, relative=True, implementation=implementation)
        # At least one page: with no keys every row is empty, but the table still needs one.
        pages = max(1, -(-logits.shape[1] // config.page_size))
        identity = jnp.broadcast_to(jnp.arange(pages, dtype=jnp.int32), (logits.shape[0], pages))
        lens = prefill_lengths(s, e, keys.num_tokens)
        return _publish_from_logits(logits, lens, identity, config, implementation, topk_algorithm)

    return by_row_chunks(run, _row_chunk(row_chunk), query, starts, ends)


def select_prefill(
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    table: CandidateTable,
    config: IndexerConfig,
    *,
    row_chunk: int | None = None,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> jax.Array:
    """`select` (mask path) for ragged prefill rows; positions relative to `starts[i]`.
    `row_chunk`, `implementation`, `topk_algorithm`: as in `publish_prefill`."""
    starts, ends = check_ragged(query, keys, starts, ends)  # keys a KeyBuffer before it is read
    _check_config(config, query, keys.head_dim, keys.format)
    _check_table(table, query, config)
    implementation = shared(implementation)
    topk_algorithm = check_algorithm(topk_algorithm)

    def run(q: QueryBundle, s: jax.Array, e: jax.Array, t: CandidateTable) -> jax.Array:
        logits = mqa_logits(q, keys, s, e, relative=True, implementation=implementation)
        return topk(
            logits,
            prefill_lengths(s, e, keys.num_tokens),
            config.index_topk,
            candidates=t,
            block_size=config.candidate_block_size,
            implementation=implementation,
            topk_algorithm=topk_algorithm,
        )

    return by_row_chunks(run, _row_chunk(row_chunk), query, starts, ends, table)


def _dense_select(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    k: int,
    lp: LayerPlan,
    topk_algorithm: str | None,
    share: fused.Shared | None = None,
) -> jax.Array:
    """The top-k over a layer's whole context, as its plan `lp` says (`share`: as in
    `_select`)."""
    if _run_fused(lp, query, cache, context_lens, block_table):
        share = share or fused.Shared.of(context_lens, block_table, cache.page_size, query.next_n)
        return fused.dense_select(query, cache, block_table, share, k, select=lp.top_select)
    impl = lp.implementation
    logits = paged_mqa_logits(query, cache, context_lens, block_table, implementation=impl)
    lens = row_lengths(context_lens, query.next_n, _capacity(block_table, cache))
    return topk(logits, lens, k, implementation=impl, topk_algorithm=topk_algorithm)


def select_plain(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    config: IndexerConfig,
    *,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
    fuse: bool = True,
) -> jax.Array:
    """A plain indexer layer of a decode step (no candidate table): the top-k over its whole
    context, `[batch·next_n, k]` logical positions, ascending, -1 padded. `implementation`,
    `topk_algorithm`, `fuse`: as in `publish`."""
    _check_paged_config(config, query, cache)
    context_lens = _checks.array(context_lens, "context_lens")
    block_table = _checks.array(block_table, "block_table")
    topk_algorithm = check_algorithm(topk_algorithm)
    lp = _layer_plan(
        "plain", query, cache, block_table, config, implementation, fuse, topk_algorithm
    )
    return _dense_select(
        query, cache, context_lens, block_table, config.index_topk, lp, topk_algorithm
    )


def select_plain_prefill(
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    config: IndexerConfig,
    *,
    row_chunk: int | None = None,
    implementation: Implementation = None,
    topk_algorithm: str | None = None,
) -> jax.Array:
    """`select_plain` for ragged prefill rows; positions relative to `starts[i]`. `row_chunk`,
    `implementation`, `topk_algorithm`: as in `publish_prefill`."""
    starts, ends = check_ragged(query, keys, starts, ends)  # keys a KeyBuffer before it is read
    _check_config(config, query, keys.head_dim, keys.format)
    implementation = shared(implementation)
    topk_algorithm = check_algorithm(topk_algorithm)

    def run(q: QueryBundle, s: jax.Array, e: jax.Array) -> jax.Array:
        logits = mqa_logits(q, keys, s, e, relative=True, implementation=implementation)
        lens = prefill_lengths(s, e, keys.num_tokens)
        return topk(
            logits,
            lens,
            config.index_topk,
            implementation=implementation,
            topk_algorithm=topk_algorithm,
        )

    return by_row_chunks(run, _row_chunk(row_chunk), query, starts, ends)
