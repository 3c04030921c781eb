"""The short-row select's rows of a cluster (cuda/smxx_short_topk.cu, ShortTopkKernel) on the
CPU stand-in. Pass 1's exchange: each CTA adds its nonzero counts into every CTA's sums, and
every CTA reads the cluster's histogram from its own shared memory. Then, where the row's
candidates (its keys at or above the k-th key's pass-1 bin) fit kGather and each CTA's fit its
region of it, each CTA stores them into rank 0 in position order and rank 0 selects on chip
(GatherSelect); otherwise the cluster-wide passes 2 and 3 and the output. Rows of two and three
CTAs taking each way (a region exactly full, one candidate over), whose k-th key is found at
each digit pass, with ties, NaN / -inf, short lengths and candidate blocks, against the oracle;
and mutants of both ways, each of which those rows catch. (tests/test_topk.py runs the select
at every width through the public op.)"""

from __future__ import annotations

import numpy as np
from selection import (
    BASE,
    ROOT,
    assert_mutants_caught,
    bf16_rows_equal_the_oracle,
    candidate_rows_equal_the_oracle,
    digit_row,
    emulate_equals_oracle,
)

SOURCE = ROOT / "cuda" / "smxx_short_topk.cu"
N = 16384 + 37  # two CTAs a row: chunks of 8704 and 7717 scores (whole warp segments)
CHUNK = 8704
N3 = 2 * 16384 + 100  # three CTAs: chunks of 11264, 11264 and 10340 scores
CHUNK3 = 11264
GATHER = 8192  # kGather: the candidates rank 0 takes, kGather / CTAs from each (to 4)
ROOM3 = GATHER // 3 // 4 * 4
# The cluster.syncs of a row's CTAs on each way (the stand-in's count): the first (every CTA
# started), pass 1's exchange and the gather's; the cluster-wide passes pass more.
GATHERED = 3


def _crowded(rng, row: np.ndarray, kept: int, start: int = 0, end: int | None = None):
    """A digit_row (stop >= 1) whose keys below the k-th key's pass-0 bin, in positions
    [start, end), are moved into that bin under the k-th key's pass-1 bin until the row's
    candidates there number `kept`."""
    digits = row.view(np.uint32) - np.uint32(BASE)
    a = digits[start:end] >> 21
    move = kept - int((a >= 2).sum())
    pick = start + rng.choice(np.flatnonzero(a < 2), move, replace=False)
    digits[pick] = (2 << 21) | (rng.integers(0, 7, move) << 10) | rng.integers(0, 1 << 10, move)
    return (digits + np.uint32(BASE)).view(np.float32)


def _rows(rng, n: int, k: int) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    """Rows whose k-th key is found at pass 1, 2 or 3 or at the ties: with few candidates
    (gathered), kGather + 1 of them (the cluster-wide passes), the first CTA's region exactly
    full (gathered) and one over (the cluster-wide passes); a row of one value but a few; random
    rows, one with NaN and -inf runs; full lengths but one cut inside the last CTA and one
    shorter than k. Then whether each row is gathered."""
    rows = [digit_row(rng, n, k, stop) for stop in (0, 1, 2, 3)]
    rows += [_crowded(rng, digit_row(rng, n, k, stop), GATHER + 1) for stop in (1, 2, 3)]
    rows.append(_crowded(rng, digit_row(rng, n, k, 2), GATHER // 2, 0, CHUNK))
    rows.append(_crowded(rng, digit_row(rng, n, k, 3), GATHER // 2 + 1, 0, CHUNK))
    flat = np.full(n, 0.5, np.float32)
    flat[rng.choice(n, 7, replace=False)] = 2.0
    special = rng.standard_normal(n).astype(np.float32)
    special[100:140], special[n - 900 : n - 895] = np.nan, -np.inf
    rows += [flat, special, rng.standard_normal(n).astype(np.float32)]
    rows.append(rng.standard_normal(n).astype(np.float32))
    lens = np.full(len(rows), n, np.int32)
    lens[-2], lens[-1] = n - 20, k - 3
    gathered = [True] * 4 + [False] * 3 + [True, False, False] + [True] * 3
    return np.stack(rows), lens, gathered


def _three_cta_rows(rng, k: int) -> tuple[np.ndarray, list[bool]]:
    """Rows of three CTAs: the top keys all in the last CTA, all in the first, random; the
    second CTA's region exactly full (gathered), the third's one over with ties at the k-th key
    (the cluster-wide passes), the second's one over. Then whether each row is gathered."""
    ramp = np.linspace(-1.0, 1.0, N3, dtype=np.float32)
    rows = [ramp, ramp[::-1].copy(), rng.standard_normal(N3).astype(np.float32)]
    rows.append(_crowded(rng, digit_row(rng, N3, k, 3), ROOM3, CHUNK3, 2 * CHUNK3))
    rows.append(_crowded(rng, digit_row(rng, N3, k, 2), ROOM3 + 1, 2 * CHUNK3))
    rows.append(_crowded(rng, digit_row(rng, N3, k, 1), ROOM3 + 1, CHUNK3, 2 * CHUNK3))
    return np.stack(rows), [True, True, True, True, False, False]


def _check_ways(syncs: list[int], gathered: list[bool], what: str) -> None:
    ways = [s == GATHERED for s in syncs]
    assert ways == gathered, f"{what}: rows gathered {ways}, expected {gathered} ({syncs})"


def _check(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores, lens, gathered = _rows(rng, N, 64)
    syncs: list[int] = []
    emulate_equals_oracle(exe, "short", scores, lens, 64, "two CTAs", syncs)
    _check_ways(syncs, gathered, "two CTAs")
    rows, gathered = _three_cta_rows(rng, 512)
    syncs = []
    emulate_equals_oracle(exe, "short", rows, np.full(len(rows), N3, np.int32), 512, "three", syncs)
    _check_ways(syncs, gathered, "three CTAs")
    candidate_rows_equal_the_oracle(exe, rng, N, 256)
    bf16_rows_equal_the_oracle(exe, rng, N, 64)  # many ties


def test_cluster_rows_equal_the_oracle(simt_topk, rng):
    _check(simt_topk, int(rng.integers(1 << 30)))


# (what, the text of the source, its replacement): each breaks the exchange or the gather.
MUTANTS = [
    (
        "sums-own-only",
        "for (int r = 0; r < cl; ++r) atomicAdd(cluster.map_shared_rank(s, r) + d, c);",
        "atomicAdd(s + d, c);",
    ),
    (
        "rank-0-skipped",
        "for (int r = 0; r < cl; ++r) atomicAdd",
        "for (int r = 1; r < cl; ++r) atomicAdd",
    ),
    (
        "part-filled-warp-not-counted",
        "const bool warp_has_keys = int64_t(warp) * kSegment < mine;",
        "const bool warp_has_keys = int64_t(warp + 1) * kSegment <= mine;",
    ),
    ("single-counts-dropped", "if (c != 0) {", "if (c > 1) {"),
    (
        "pass-1-excluded-counted",
        "atomicAdd(key[i] != kExcluded ? &counts[key[i] >> 21] : lane_dump, 1u);",
        "atomicAdd(&counts[key[i] >> 21], 1u);",
    ),
    (
        "gathered-key-and-position-swapped",
        "at.PutIfAbove<kSecond>(kk, lowest - 1, kk, uint32_t(p + e));",
        "at.PutIfAbove<kSecond>(kk, lowest - 1, uint32_t(p + e), kk);",
    ),
    (
        "sums-not-zeroed",
        "for (int i = threadIdx.x; i < 3 * kBins; i += kThreads) (&sh.sum[0][0])[i] = 0;",
        "",
    ),
    ("own-counts-scanned", "    h = s;\n", ""),
    (
        "gather-warps-before-miscounted",
        "lane < warp ? warp_kept : 0u",
        "lane <= warp ? warp_kept : 0u",
    ),
    ("gather-regions-overlap", "at = rank * room;", "at = 0;"),
    ("gather-copy-tail-dropped", "vecs = (count + 3) / 4", "vecs = count / 4"),
    ("gather-copied-before-staged", "if (rank != 0) {\n      __syncthreads();", "if (rank != 0) {"),
    (
        "gather-region-count-wrong",
        "&sh.region_kept[rank], 0) = count;",
        "&sh.region_kept[rank], 0) = room;",
    ),
    ("gather-region-overfilled", "if (count <= room) {", "if (count <= room + 1) {"),
    (
        "gather-overflow-not-told-to-rank-0",
        "for (int q = 0; q < cl; ++q) *cluster",
        "for (int q = 1; q < cl; ++q) *cluster",
    ),
    (
        "gather-overflow-ignored",
        "  if (sh.overflow != 0) return false;",
        "  if (false) return false;",
    ),
    ("gather-chunk-start-dropped", "p0 = int32_t(chunk_lo) + warp", "p0 = warp"),
    (
        "gather-bin-dropped",
        "const uint32_t lowest = first.Lowest(k);",
        "const uint32_t lowest = first.Lowest(k) + (1u << 21);",
    ),
    (
        "gather-kept-halved",
        "const int32_t kept = first.Candidates(a.k);",
        "const int32_t kept = first.Candidates(a.k) / 2;",
    ),
    ("gathered-segments-floor", "(kept + kThreads - 1) / kThreads * 32", "kept / kThreads * 32"),
    ("gathered-region-walk-off-by-one", "i >= region_kept[r]) i -=", "i > region_kept[r]) i -="),
    ("gather-histograms-not-zeroed", "(&sh.select.hist[0][0])[i] = 0;", "(void)i;"),
    ("gather-overflow-not-zeroed", "if (threadIdx.x == 0) sh.overflow = 0;", ""),
    ("gather-never", "if (cl > 1 && kept <= kGather &&", "if (cl > 1 && kept < 0 &&"),
    ("gather-overflow-told-two-ranks", "q < cl; ++q) *cluster", "q < 2; ++q) *cluster"),
]


def test_mutants_of_the_exchange_are_caught(simt_topk, rng, tmp_path):
    assert_mutants_caught(simt_topk, rng, tmp_path, SOURCE, MUTANTS, "short_topk.cc", _check)
