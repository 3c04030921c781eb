"""The filter select's split rows (cuda/smxx_filter_topk.cu, FilterSplitKernel and
FilterMergeKernel) on the CPU stand-in: the launcher is told an SM count, so that a few rows
split over more CTAs than a cluster holds, and given a poisoned workspace. Rows of 12 chunks at
k = 512 and of 3 chunks at k = 4096 (a slot of exactly k pairs): spread keys, keys ascending
with position (the last chunk's pairs overflow its slot and are cut), ties at the k-th key,
a plateau of ties in every chunk (the merge cuts keys all equal; other rows' gathered keys
share their top bytes, where its radix steps start), rows whose large keys sit exactly where
the row sample looks (fewer than k reach the row bar: every chunk is streamed again and the
last to arrive merges), length cuts, short and empty rows, candidate blocks and ragged starts;
against the oracle. And mutants of the split paths, each of which the rows catch."""

from __future__ import annotations

import numpy as np
import oracle
from selection import (
    ROOT,
    assert_mutants_caught,
    assert_rows_equal,
    emulate,
    filter_row,
    oracle_rows,
)

SOURCE = ROOT / "cuda" / "smxx_filter_topk.cu"
ROW_SAMPLE = 4096  # keys a split row's bar is sampled from, at p = i * len // ROW_SAMPLE


def _launch(exe, rows: int, parts: int) -> str:
    """The stand-in command whose SM count gives `rows` rows `parts` CTAs each."""
    return f"filter:{rows * parts}"


def _row(rng, kind: str, n: int, k: int, parts: int) -> np.ndarray:
    if kind == "trap":  # fewer large keys than k, all of them at the row sample's positions
        row = np.full(n, -5.0, np.float32)
        sampled = np.unique(np.arange(ROW_SAMPLE) * n // ROW_SAMPLE)
        row[rng.choice(sampled, k * 4 // 5, replace=False)] = 3.0
        return row
    return filter_row(rng, kind, n, k, parts)  # ascending, ties, spread; plateau: every slot cut


# (n, k, parts) -> the rows run there (kind, length); the launcher takes `parts` CTAs a row.
ROWS = {
    (100000, 512, 12): (
        ("spread", 100000 - 1234),
        ("ascending", 100000),
        ("trap", 100000),
        ("ties", 100000),
        ("plateau", 100000),
        ("spread", 5000),
        ("spread", 0),
    ),
    (60000, 4096, 3): (("spread", 60000), ("ascending", 60000), ("trap", 60000)),
}


def _equal_the_oracle(exe, scores, lens, k, parts, what, starts=None) -> None:
    status, got = emulate(exe, _launch(exe, len(scores), parts), scores, lens, k, starts)
    assert_rows_equal(status, got, oracle_rows(scores, lens, k, starts), what)


def _check(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for (n, k, parts), rows in ROWS.items():
        scores = np.stack([_row(rng, kind, n, k, parts) for kind, _ in rows])
        lens = np.array([length for _, length in rows], np.int32)
        _equal_the_oracle(exe, scores, lens, k, parts, f"n={n} k={k} {rows}:")


def test_split_rows_equal_the_oracle(simt_topk, rng):
    _check(simt_topk, int(rng.integers(1 << 30)))


def test_split_rows_with_starts_equal_the_oracle(simt_topk, rng):
    """Ragged rows: each starts at its own column, one past the row's end (nothing visible)."""
    n, k = 100000, 512
    scores = rng.standard_normal((4, n)).astype(np.float32)
    starts = np.array([0, 777, 30001, n + 5], np.int32)
    lens = np.array([n, n - 777, 50000, 10], np.int32)
    _equal_the_oracle(simt_topk, scores, lens, k, 12, "starts:", starts)


def test_split_candidate_blocks_equal_the_oracle(simt_topk, rng):
    """Candidate blocks over 12 chunks: NaN and -inf blocks, the newest block pinned."""
    nb, c, block_size = 100000, 512, 8
    scores = rng.standard_normal((3, nb)).astype(np.float32)
    scores[0, rng.choice(nb, 5000, replace=False)] = np.nan
    scores[1, rng.choice(nb, 5000, replace=False)] = -np.inf
    scores[2, : nb - 10] = -1.0  # ties everywhere: the lowest blocks win
    lens = np.array([nb * block_size, nb * block_size - 77, 60000 * block_size + 3], np.int32)
    status, got = emulate(
        simt_topk, _launch(simt_topk, 3, 12), scores, lens, c, block_size=block_size, mode=1
    )
    want = [oracle.candidate_row(s, int(length), c, block_size) for s, length in zip(scores, lens)]
    assert_rows_equal(status, got, want, "candidate blocks")


# (what, the text of the source, its replacement): each breaks one split path.
MUTANTS = [
    (
        "row-bar-not-recorded",
        "w.words[SplitRow::kBar] = uint32_t(bar);",
        "w.words[SplitRow::kBar] = 1;",
    ),
    (
        "shortfall-not-streamed-again",
        "if (count < a.k && __ldcg(w.words + SplitRow::kBar) > 1) {",
        "if (count < 0) {",
    ),
    ("slot-overflow-not-cut", "if (count > limit) {  // uniform", "if (count > kCap) {"),
    ("gathered-before-all-arrived", "== uint32_t(parts - 1);", "== 0u;"),
    (
        "pairs-from-the-wrong-slot",
        "keys[i] = __ldcg(w.Keys(c) + j), pos[i] = __ldcg(w.Positions(c) + j);",
        "keys[i] = __ldcg(w.Keys(0) + j), pos[i] = __ldcg(w.Positions(0) + j);",
    ),
    # The merge's cut starts below the gathered keys' common top bytes (CommonTopBytes).
    (
        "merge-cut-skips-a-byte-too-many",
        "return __clz(int(sh.key_and ^ sh.key_or)) / 8;",
        "return min(__clz(int(sh.key_and ^ sh.key_or)) / 8 + 1, 4);",
    ),
    ("merge-cut-of-equal-keys-unpublished", "if (first >= passes) __syncthreads();", ""),
]


def test_mutants_of_the_split_rows_are_caught(simt_topk, rng, tmp_path):
    assert_mutants_caught(simt_topk, rng, tmp_path, SOURCE, MUTANTS, "filter_topk.cc", _check)
