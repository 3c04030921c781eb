"""Public candidate-block ops: block amax and the published table (the top-C block selection is a
selection op: `dsv41_jax.select_candidate_blocks`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dsv41_jax import _checks
from dsv41_jax._dispatch import Impl, Implementation, Op
from dsv41_jax.blocks import ffi, pallas_mgpu, reference
from dsv41_jax.types import CandidateTable

# Dispatch by measurement (H200, BENCHMARKS.md, the block_amax and sort rows): the Pallas block
# amax is faster than the XLA reference at [8, 128K], [64, 128K] and [64, 1M]; the CUDA sort is
# several times faster than the reference at [8, 2048].
BLOCK_AMAX = Op(
    "block_amax",
    pallas=Impl(pallas_mgpu.block_amax, pallas_mgpu.supports),
    reference=reference.block_amax,
)
SORT_CANDIDATE_BLOCKS = Op(
    "sort_candidate_blocks",
    ffi=Impl(ffi.sort_candidate_blocks, ffi.supports),
    reference=reference.sort_candidate_blocks,
)


def block_amax(
    scores: jax.Array,
    lengths: jax.Array,
    *,
    block_size: int = 8,
    starts: jax.Array | None = None,
    pin_newest: bool = True,
    implementation: Implementation = None,
) -> jax.Array:
    """Block scores: the max of each block's visible, non-NaN scores.

    Block `b` of row `r` covers positions `[b·B, (b+1)·B)`; positions at or past `lengths[r]` are
    never read as scores. A block with no finite-or-+inf visible score scores -inf, and so does
    every block at or past `nblocks = ceil(len / B)`. With `pin_newest`, block `nblocks - 1` (the
    only one that can be partial) scores +inf.

    Returns float32 `[rows, ceil(N / B)]`.
    """
    scores = _checks.array(scores, "scores", ranked=True)
    lengths = _checks.array(lengths, "lengths")
    starts = None if starts is None else _checks.array(starts, "starts")
    _checks.score_rows(scores, lengths, starts)
    block_size = _checks.positive_int(block_size, "block_size")
    pin = _checks.boolean(pin_newest, "pin_newest")
    # float32 whatever the scores' type: the max of bf16 / fp16 values is exact in float32.
    return BLOCK_AMAX(implementation, scores, lengths, block_size, starts, pin).astype(jnp.float32)


def sort_candidate_blocks(
    selected: jax.Array,
    lengths: jax.Array,
    block_table: jax.Array,
    *,
    block_size: int = 8,
    page_size: int = 64,
    implementation: Implementation = None,
) -> CandidateTable:
    """Build the published CandidateTable from selected block ids in any order.

    Ids outside `[0, nblocks)` (e.g. -1 padding) and repeats are dropped. `blocks` is ascending,
    INT32_MAX padded; `count` the number of blocks; `valid_lens` the sparse row length (`B·(count
    - 1) + ((len - 1) mod B) + 1` when the newest block ends the table, `B·count` otherwise, 0 for
    an empty table); `physical` the blocks as cache slots of size B (`slot // B`) through the
    row's page table, -1 padded (and -1 for a negative page id or one whose slots would pass
    the int32 range, `> (2**31 - P) // P`, as in `logical_to_physical`).

    The `"ffi"` kernel (one CTA per row, a shared-memory bitmap) takes C <= 4096 and rows up to
    2^20 blocks; beyond that it declines (logged) and the reference runs.

    Args:
      selected: int `[rows, C]`.
      lengths: int `[rows]` row lengths in positions.
      block_table: int `[rows, max_pages]` per-row page table.
    """
    selected = _checks.array(selected, "selected")
    lengths = _checks.array(lengths, "lengths")
    block_table = _checks.array(block_table, "block_table")
    _checks.rank(selected, 2, "selected")
    _checks.integer(selected, "selected")
    rows = selected.shape[0]
    _checks.shape(lengths, (rows,), "lengths")
    _checks.integer(lengths, "lengths")
    _checks.rank(block_table, 2, "block_table")
    _checks.shape(block_table, (rows, None), "block_table")
    _checks.integer(block_table, "block_table")
    if block_table.shape[1] == 0:
        raise ValueError("block_table must have at least one page column")
    b = _checks.positive_int(block_size, "block_size")
    p = _checks.positive_int(page_size, "page_size")
    if p % b:
        raise ValueError(f"page_size ({p}) must be a multiple of block_size ({b})")
    _checks.lengths_within(
        lengths, block_table.shape[1] * p, "lengths", "positions of block_table's pages"
    )
    return SORT_CANDIDATE_BLOCKS(implementation, selected, lengths, block_table, b, p)
