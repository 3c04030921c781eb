"""Public selection ops: masked top-k, the top-C candidate blocks (the same selection kernels in
another mode), sparse-column and page-table transforms."""

from __future__ import annotations

import jax

from dsv41_jax import _checks
from dsv41_jax._dispatch import Impl, Implementation, Op
from dsv41_jax.plan import Plan, resolve
from dsv41_jax.topk import ffi, pallas_mgpu, reference
from dsv41_jax.topk.spec import Spec
from dsv41_jax.types import CandidateTable

# The order the implementations are tried in and the CUDA select "ffi" runs are the plan's
# decisions (`dsv41_jax.plan`, with the measurements behind them).
TOPK = Op("topk", ffi=ffi.topk, pallas=pallas_mgpu.topk, reference=reference.topk)
SELECT_CANDIDATE_BLOCKS = Op(
    "select_candidate_blocks",
    ffi=ffi.select_candidate_blocks,
    pallas=pallas_mgpu.select_candidate_blocks,
    reference=reference.select_candidate_blocks,
)
LOGICAL_TO_PHYSICAL = Op(
    "logical_to_physical",
    ffi=Impl(ffi.logical_to_physical, ffi.supports_page_transform),
    reference=reference.logical_to_physical,
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
    topk_algorithm: str | None = None,
    plan: Plan | None = None,
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
      implementation: None (the plan's order: the fastest available for the inputs), a name or
        a preference order.
      topk_algorithm: the CUDA select `ffi` runs wherever it takes the call ("short",
        "filter", "cluster"); None: the plan's policy (`dsv41_jax.plan`).
      plan: a `dsv41_jax.plan(...)` made for this call (same shapes, dtype, k, starts, mask
        and block size), instead of `implementation` and `topk_algorithm`.

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
    spec = Spec.of("topk", scores, k, starts, candidates, block_size)
    p = _plan_for(spec, implementation, topk_algorithm, plan)
    return TOPK.run_planned(p, scores, lengths, k, starts, candidates, block_size, **_options(p))


def _options(p: Plan) -> dict[str, str | None]:
    """The keyword arguments of the implementation the plan runs: the CUDA select for "ffi"."""
    return {"select": p.select} if p.runs == "ffi" else {}


def _plan_for(
    spec: Spec, implementation: Implementation, topk_algorithm: str | None, plan: Plan | None
) -> Plan:
    """The plan of a call: `plan` when given (checked against the call), else resolved."""
    if plan is None:
        return resolve(spec, implementation, topk_algorithm)
    if not isinstance(plan, Plan):
        raise ValueError(f"plan must be a dsv41_jax.Plan, got {type(plan).__name__}")
    if implementation is not None or topk_algorithm is not None:
        raise ValueError("pass either plan or implementation / topk_algorithm, not both")
    if plan.spec != spec:
        raise ValueError(f"plan was made for {plan.spec}, not for this call ({spec})")
    return plan


def sparse_columns_to_positions(
    columns: jax.Array, table: CandidateTable, block_size: int
) -> jax.Array:
    """Sparse-row columns -> logical positions: `j -> blocks[j // B]·B + j % B`; -1 stays -1.

    Ascending columns map to ascending positions (the table is ascending), so a top-k over the
    sparse row stays in the contract's order. A column outside `[0, C·B)`, or of a negative or
    padding block, or of a block whose positions pass the int32 range (`> (2**31 - B) // B`),
    maps to -1: no position wraps.
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
    topk_algorithm: str | None = None,
    plan: Plan | None = None,
) -> jax.Array:
    """The candidate blocks of each row: exactly `count = min(C, nblocks)` block ids.

    The newest block `nblocks - 1` is always chosen; the rest are the best blocks by (score desc,
    block id asc), NaN counting as -inf (so -inf blocks fill a row that has too few scored
    ones). When `nblocks <= C` every block is chosen.

    Args:
      block_scores: float `[rows, NB]`, e.g. from `block_amax`.
      lengths: int `[rows]` row lengths in positions (`nblocks = ceil(len / B)`, at most NB).
      num_candidates: C.
      implementation, topk_algorithm, plan: as in `topk` (a plan of op
        "select_candidate_blocks", k = C).

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
    spec = Spec.of("select_candidate_blocks", block_scores, c, block_size=b)
    p = _plan_for(spec, implementation, topk_algorithm, plan)
    return SELECT_CANDIDATE_BLOCKS.run_planned(p, block_scores, lengths, c, b, **_options(p))
