"""Public logits ops: dense paged, sparse paged (candidate blocks only) and ragged prefill."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from dsv41_jax import _checks
from dsv41_jax._dispatch import Impl, Implementation, Op
from dsv41_jax.logits import ffi, reference
from dsv41_jax.rows import row_block_table, row_lengths
from dsv41_jax.types import CandidateTable, KeyBuffer, PagedIndexCache, QueryBundle


def _kernel_op(name: str, supports: Callable[..., str | None], what: str) -> Op:
    """The op `name`: the ffi module's function of that name on the SM90 and SM100 kernel
    families (their status records "sm90 <what>" and "sm100 <what>", docs/status.md), `supports`
    saying which calls they take, then the reference module's function of that name."""
    family = tuple((f, f"{f} {what}") for f in ("sm90", "sm100"))
    run = Impl(getattr(ffi, name), supports, ffi.kernel_family, family)
    return Op(name, ffi=run, reference=getattr(reference, name))


# Dispatch by measurement (H200, BENCHMARKS.md, the logits rows): DeepGEMM's kernels run near
# the byte floor (paged) and the FP8 FLOP floor (ragged prefill); the lax.map references are
# two to three orders of magnitude slower. Sparse: SM90 runs the project's kernel, SM100
# DeepGEMM's (each one's status: docs/status.md).
PAGED_MQA_LOGITS = _kernel_op("paged_mqa_logits", ffi.paged_supports, "paged logits")
SPARSE_PAGED_MQA_LOGITS = _kernel_op(
    "sparse_paged_mqa_logits", ffi.sparse_supports, "sparse logits"
)
MQA_LOGITS = _kernel_op("mqa_logits", ffi.ragged_supports, "prefill logits")


def logits_width(max_pages: int, page_size: int) -> int:
    """`paged_mqa_logits`' default width: the page table in whole 256-position splits (the
    width DeepGEMM's kernel writes)."""
    return -(-max_pages * page_size // 256) * 256


def check_query(query: QueryBundle, head_dim: int, format: str, what: str) -> None:
    """The bundle's dtypes and shapes, and that it matches the keys it is scored against."""
    if not isinstance(query, QueryBundle):
        raise ValueError(
            f"query must be a QueryBundle (make one with dsv41_jax.quantize_queries), got "
            f"{type(query).__name__}"
        )
    query.check_one_layer("query")
    if query.format != format:
        raise ValueError(
            f"query.format {query.format!r} does not match the {what} ({format!r}): quantize the "
            f"queries with dsv41_jax.quantize_queries(q, weights, {format!r})"
        )
    _checks.rank(query.values, 4, "query.values")
    b, n, h, _ = query.values.shape
    if query.head_dim != head_dim:
        raise ValueError(
            f"query head_dim {query.head_dim} does not match the {what} head_dim {head_dim}"
        )
    _checks.shape(query.weights, (b, n, h), "query.weights")
    _checks.dtype(query.weights, jnp.float32, "query.weights")
    if format == "fp8":
        _checks.dtype(query.values, jnp.float8_e4m3fn, "query.values")
        if query.scales is not None:
            raise ValueError("query.scales must be None for fp8 (fold the scale into weights)")
    else:
        _checks.dtype(query.values, jnp.uint8, "query.values")
        if query.scales is None:
            raise ValueError("query.scales are required for mxfp4 (ue8m0 exponents per 32)")
        _checks.shape(query.scales, (b, n, h, head_dim // 32), "query.scales")
        _checks.dtype(query.scales, jnp.uint8, "query.scales")


def check_paged(
    query: QueryBundle, cache: PagedIndexCache, context_lens: jax.Array, block_table: jax.Array
) -> None:
    if not isinstance(cache, PagedIndexCache):
        raise ValueError(f"cache must be a PagedIndexCache, got {type(cache).__name__}")
    cache.check_one_layer("cache")
    check_query(query, cache.head_dim, cache.format, "cache")
    _checks.shape(context_lens, (query.batch,), "context_lens")
    _checks.integer(context_lens, "context_lens")
    _checks.rank(block_table, 2, "block_table")
    _checks.shape(block_table, (query.batch, None), "block_table")
    _checks.integer(block_table, "block_table")
    if block_table.shape[1] == 0:
        raise ValueError(
            f"block_table must have at least one page column, got shape {tuple(block_table.shape)}"
        )
    capacity = block_table.shape[1] * cache.page_size
    _checks.lengths_within(
        context_lens, capacity, "context_lens", f"block_table holds {capacity} positions per row"
    )


def paged_mqa_logits(
    query: QueryBundle,
    cache: PagedIndexCache,
    context_lens: jax.Array,
    block_table: jax.Array,
    *,
    num_columns: int | None = None,
    implementation: Implementation = None,
) -> jax.Array:
    """Dense paged MQA logits of every visible position.

    `logits[r, t] = (Σ_h w[r, h]·relu(q[r, h]·k[t]))·s[t]` in fp32, with `k[t]`, `s[t]` read through
    the request's page table. Row `r = b·next_n + j` sees `L_b - next_n + 1 + j` positions.

    Args:
      query: the layer's QueryBundle, `[batch, next_n, H, D]`.
      cache: the layer's paged index cache (same format and head_dim as `query`).
      context_lens: int `[batch]` request lengths L (positions, after compression).
      block_table: int `[batch, max_pages]` page ids of each request.
      num_columns: logits width; default `max_pages · page_size` rounded up to a multiple of 256
        (the columns past the page table are never visible).

    Returns:
      float32 `[batch·next_n, num_columns]`. Columns at or past a row's length hold -inf in the
      reference (kernels may leave them unwritten: no selection op reads past a row's length);
      positions on a page id outside `[0, num_pages)` hold NaN. Lengths are clamped to
      `[0, min(num_columns, max_pages·page_size)]` (`rows.clamp_lengths`: the request's
      length, before its rows are derived); lengths known at trace time outside it raise
      ValueError.
    """
    context_lens = _checks.array(context_lens, "context_lens")
    block_table = _checks.array(block_table, "block_table")
    check_paged(query, cache, context_lens, block_table)
    if num_columns is None:  # whole 256-position splits: the width DeepGEMM's kernel writes
        num_columns = logits_width(block_table.shape[1], cache.page_size)
    num_columns = _checks.positive_int(num_columns, "num_columns")
    _checks.lengths_within(
        context_lens, num_columns, "context_lens", f"num_columns is {num_columns}"
    )
    return PAGED_MQA_LOGITS(implementation, query, cache, context_lens, block_table, num_columns)


def sparse_paged_mqa_logits(
    query: QueryBundle,
    cache: PagedIndexCache,
    table: CandidateTable,
    context_lens: jax.Array,
    block_table: jax.Array,
    *,
    block_size: int,
    implementation: Implementation = None,
) -> jax.Array:
    """MQA logits of the published candidate blocks only (the consumer's sparse path).

    Returns `[rows, C·B]`: column `j` scores position `table.blocks[r, j // B]·B + j % B` for
    `j < table.valid_lens[r]`. The table must be canonical (as `publish` and
    `sort_candidate_blocks` return it): the reference reads `blocks`, the kernels `physical`
    (SM90) or `blocks` (SM100) with `valid_lens`; `select` rebuilds any table it is given.
    The reference gives float32 with -inf in the other columns (and in those of a negative
    block or one whose positions pass the int32 range: no position wraps); the "ffi" implementation
    leaves the other columns unspecified and gives float32 on SM90 (the project's kernel over
    the paged cache: bitwise the SM90 `paged_mqa_logits` at the same positions, NaN on slots
    outside the cache) or bfloat16 on SM100 (DeepGEMM's kernel; status: docs/status.md). Same
    formula as `paged_mqa_logits`.
    """
    context_lens = _checks.array(context_lens, "context_lens")
    block_table = _checks.array(block_table, "block_table")
    check_paged(query, cache, context_lens, block_table)
    if not isinstance(table, CandidateTable):
        raise ValueError(f"table must be a CandidateTable, got {type(table).__name__}")
    block_size = _checks.positive_int(block_size, "block_size")
    table.check_block_size(block_size, "block_size")
    table.check_arrays(query.num_rows, "table")
    lens = row_lengths(context_lens, query.next_n, block_table.shape[1] * cache.page_size)
    bt = row_block_table(block_table, query.next_n)
    return SPARSE_PAGED_MQA_LOGITS(implementation, query, cache, table, lens, bt, block_size)


def mqa_logits(
    query: QueryBundle,
    keys: KeyBuffer,
    starts: jax.Array,
    ends: jax.Array,
    *,
    relative: bool = False,
    implementation: Implementation = None,
) -> jax.Array:
    """Ragged prefill MQA logits: row `i` scores packed keys `[starts[i], ends[i])`.

    Same formula as `paged_mqa_logits`. `query` holds one row per token (`next_n == 1`).

    Args:
      query: QueryBundle `[rows, 1, H, D]`.
      keys: the packed KeyBuffer `[T, ...]` (same format and head_dim as `query`).
      starts, ends: int `[rows]`, `0 <= starts <= ends <= T`.
      relative: the layout of the result. False: column `t` is key `t` (a row's range sits at
        `[starts[i], ends[i])`). True: column `j` is key `starts[i] + j` (the range sits at
        `[0, ends[i] - starts[i])`), the layout the prefill selection reads without `starts`
        and the one DeepGEMM's kernel writes; the "ffi" implementation makes the other layout
        from it with one more pass over the logits.
      implementation: None (fastest available), "ffi" (DeepGEMM's kernels: on SM90 fp8 keys
        with 32 or 64 heads; on SM100 mxfp4 keys with 32 heads; head_dim 128; each one's
        status: docs/status.md) or "reference".

    Returns:
      float32 `[rows, T]`, -inf outside each row's range. Ranges known at trace time outside
      `[0, T]` or with `starts > ends` raise ValueError; traced ones are clamped to
      `0 <= starts <= ends <= T`.
    """
    relative = _checks.boolean(relative, "relative")
    starts, ends = check_ragged(query, keys, starts, ends)
    return MQA_LOGITS(implementation, query, keys, starts, ends, relative)


def check_ragged(
    query: QueryBundle, keys: KeyBuffer, starts: jax.Array, ends: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The ragged prefill inputs: one query row per token, `[rows]` integer ranges inside the
    key buffer (checked when known at trace time). Returns (starts, ends) as arrays."""
    if not isinstance(keys, KeyBuffer):
        raise ValueError(
            f"keys must be a KeyBuffer (make one with dsv41_jax.quantize_keys), got "
            f"{type(keys).__name__}"
        )
    keys.check_one_layer("keys")
    check_query(query, keys.head_dim, keys.format, "keys")
    if query.next_n != 1:
        raise ValueError(f"mqa_logits: query must have next_n == 1, got {query.next_n}")
    rows = query.num_rows
    starts, ends = _checks.array(starts, "starts"), _checks.array(ends, "ends")
    for name, v in (("starts", starts), ("ends", ends)):
        _checks.shape(v, (rows,), name)
        _checks.integer(v, name)
        _checks.lengths_within(v, keys.num_tokens, name, "positions of the packed key buffer")
    s, e = _checks.concrete(starts), _checks.concrete(ends)
    if s is not None and e is not None and (s > e).any():
        r = int(np.argmax(s > e))
        raise ValueError(f"starts must be <= ends (row {r}: starts {s[r]} > ends {e[r]})")
    return starts, ends
