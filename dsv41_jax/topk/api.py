"""Public selection ops: masked top-k, the top-C candidate blocks (the same selection kernels in
another mode), sparse-column and page-table transforms."""

from __future__ import annotations

import jax

from dsv41_jax import _checks
from dsv41_jax._dispatch import Implementation, Op
from dsv41_jax.topk import ffi, pallas_mgpu, reference
from dsv41_jax.types import CandidateTable

# Dispatch by measurement (H200, BENCHMARKS.md): the Pallas select first where it is the
# fastest (rows of up to 16,384 columns, masked rows it gathers, candidate selection over up to
# 16,384 blocks: `pallas_mgpu.preferred`), else the CUDA selects (top-k k=512 [8, 128K] ffi 15.9
# us, pallas 16.3; [64, 1M] 151 against 277), then the XLA reference (hundreds of us). Which
# CUDA select "ffi" runs: topk.ffi.algorithm_for.
PALLAS_FIRST, FFI_FIRST = ("pallas", "ffi", "reference"), ("ffi", "pallas", "reference")


def _topk_order(
    scores: jax.Array,
    lengths: jax.Array,
    k: int,
    starts: jax.Array | None,
    candidates: jax.Array | None,
    block_size: int,
) -> tuple[str, ...]:
    return (
        PALLAS_FIRST
        if pallas_mgpu.preferred(scores, k, starts, candidates, block_size)
        else FFI_FIRST
    )


def _candidate_order(
    block_scores: jax.Array, lengths: jax.Array, c: int, block_size: int
) -> tuple[str, ...]:
    preferred = pallas_mgpu.preferred(block_scores, c, None, None, block_size, blocks=True)
    return PALLAS_FIRST if preferred else FFI_FIRST


TOPK = Op("topk", _topk_order, ffi=ffi.topk, pallas=pallas_mgpu.topk, reference=reference.topk)
SELECT_CANDIDATE_BLOCKS = Op(
    "select_candidate_blocks",
    _candidate_order,
    ffi=ffi.select_candidate_blocks,
    pallas=pallas_mgpu.select_candidate_blocks,
    reference=reference.select_candidate_blocks,
)
LOGICAL_TO_PHYSICAL = Op(
    "logical_to_physical", ffi=ffi.logical_to_physical, reference=reference.logical_to_physical
)


def topk(
    scores: jax.Array,
    lengths: jax.Array,
    k: int,
    *,
    starts: jax.Array | None = None,
    candidates: CandidateTable | jax.Array | None = None,
    block_size: int = 8,
    implementation: Implementation = None,
) -> jax.Array:
    """Top-k positions of each row by (score desc, position asc), ascending, -1 padded.

    Position `p` of row `r` (its score at column `starts[r] + p`; `starts` defaults to 0) is a
    candidate iff `0 <= p < lengths[r]`, its score is not NaN or -inf, and, when `candidates` is
    given, block `p // block_size` is in the row's candidate table (the consumer's mask path,
    fused: no masked copy of the scores). Pseudo-code per row::

        ok = [p for p in range(len) if not isnan(s[p]) and s[p] > -inf and in_table(p // B)]
        best = sorted(ok, key=lambda p: (-s[p], p))[:k]
        return sorted(best) + [-1] * (k - len(best))

    Args:
      scores: float `[rows, N]` (fp32 or bf16; -0.0 equals +0.0).
      lengths: int `[rows]` visible positions per row (clamped to the row inside jit).
      k: positive int.
      starts: optional int `[rows]` column of position 0 (ragged prefill rows).
      candidates: a CandidateTable or its int32 `blocks [rows, C]` (ascending, INT32_MAX padded).
      block_size: candidate block size B (must equal a CandidateTable's own `block_size`).

    Returns:
      int32 `[rows, k]` logical positions (relative to `starts`).
    """
    scores = _checks.array(scores, "scores", ranked=True)
    lengths = _checks.array(lengths, "lengths")
    starts = None if starts is None else _checks.array(starts, "starts")
    rows = _checks.score_rows(scores, lengths, starts)
    k = _checks.positive_int(k, "k")
    block_size = _checks.positive_int(block_size, "block_size")
    if isinstance(candidates, CandidateTable):
        candidates.check_block_size(block_size, "block_size")
        candidates.check_arrays(rows, "candidates")
        candidates = candidates.blocks
    if candidates is not None:
        candidates = _checks.array(candidates, "candidates")
        _checks.rank(candidates, 2, "candidates")
        _checks.shape(candidates, (rows, None), "candidates")
        _checks.integer(candidates, "candidates")
    return TOPK(implementation, scores, lengths, k, starts, candidates, block_size)


def sparse_columns_to_positions(
    columns: jax.Array, table: CandidateTable, block_size: int
) -> jax.Array:
    """Sparse-row columns -> logical positions: `j -> blocks[j // B]·B + j % B`; -1 stays -1.

    Ascending columns map to ascending positions (the table is ascending), so a top-k over the
    sparse row stays in the contract's order. A column of a negative or padding block maps to
    -1.
    """
    columns = _checks.array(columns, "columns")
    if not isinstance(table, CandidateTable):
        raise ValueError(f"table must be a CandidateTable, got {type(table).__name__}")
    table.check_arrays(None, "table")
    _checks.rank(columns, 2, "columns")
    _checks.shape(columns, (table.num_rows, None), "columns")
    _checks.integer(columns, "columns")
    table.check_block_size(block_size, "block_size")
    return reference.sparse_columns_to_positions(columns, table, block_size)


def logical_to_physical(
    indices: jax.Array,
    block_table: jax.Array,
    page_size: int,
    *,
    implementation: Implementation = None,
) -> jax.Array:
    """Logical positions -> cache slots: `p -> block_table[r, p // P]·P + p % P`; -1 stays -1.

    Positions past the page table, on a negative page id, or on a page id whose slots would pass
    the int32 range (`> (2**31 - P) // P`), map to -1 (nothing is read out of bounds, no slot
    wraps). `block_table` is per row (`[rows, max_pages]`).
    """
    indices = _checks.array(indices, "indices")
    block_table = _checks.array(block_table, "block_table")
    _checks.rank(indices, 2, "indices")
    _checks.integer(indices, "indices")
    _checks.rank(block_table, 2, "block_table")
    _checks.shape(block_table, (indices.shape[0], None), "block_table")
    _checks.integer(block_table, "block_table")
    if block_table.shape[1] == 0:
        raise ValueError("block_table must have at least one page column")
    page_size = _checks.positive_int(page_size, "page_size")
    return LOGICAL_TO_PHYSICAL(implementation, indices, block_table, page_size)


def select_candidate_blocks(
    block_scores: jax.Array,
    lengths: jax.Array,
    *,
    num_candidates: int,
    block_size: int = 8,
    implementation: Implementation = None,
) -> jax.Array:
    """The candidate blocks of each row: exactly `count = min(C, nblocks)` block ids.

    The newest block `nblocks - 1` is always chosen; the rest are the best blocks by (score desc,
    block id asc), NaN counting as -inf (so -inf blocks fill a row that has too few scored
    ones). When `nblocks <= C` every block is chosen.

    Args:
      block_scores: float `[rows, NB]`, e.g. from `block_amax`.
      lengths: int `[rows]` row lengths in positions (`nblocks = ceil(len / B)`, at most NB).
      num_candidates: C.

    `block_scores` must come from `block_amax` with the same `block_size`: the shapes cannot
    tell (eagerly, lengths past `NB·B` raise; under jit they are clamped to `NB·B`).

    Returns:
      int32 `[rows, C]` block ids, ascending, padded with -1.
    """
    block_scores = _checks.array(block_scores, "block_scores", ranked=True)
    lengths = _checks.array(lengths, "lengths")
    _checks.rank(block_scores, 2, "block_scores")
    _checks.floating(block_scores, "block_scores")
    _checks.shape(lengths, (block_scores.shape[0],), "lengths")
    _checks.integer(lengths, "lengths")
    c = _checks.positive_int(num_candidates, "num_candidates")
    b = _checks.positive_int(block_size, "block_size")
    _checks.lengths_within(
        lengths, block_scores.shape[1] * b, "lengths", f"{block_scores.shape[1]} blocks of {b}"
    )
    return SELECT_CANDIDATE_BLOCKS(implementation, block_scores, lengths, c, b)
