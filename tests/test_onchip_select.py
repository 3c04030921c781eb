"""The on-chip select of the SM90 sparse consumer (cuda/smxx_onchip_select.cuh) on the CPU
stand-in: the exact top-k of a row whose keys the CTAs of its cluster (1-16 a row) store into rank
0's shared memory, in column order, each column written as the position its candidate block maps
to. The
GPU kernel around it (ffi/sm90_sparse_select.cu) needs WGMMA; tests/simt/onchip_select.cc
makes the same keys from given scores in the same layout and calls the same select, with 640
threads a CTA and whole 64-column tiles a CTA as there.

The stand-in is slow (a CTA of 640 fibers costs some 60 ms), so the cases are many short rows
in few launches and a handful of wide ones."""

from __future__ import annotations

import numpy as np
import pytest
from factories import scores as make_scores
from selection import (
    ROOT,
    UNWRITTEN,
    assert_mutants_caught,
    assert_rows_equal,
    digit_row,
    emulate_onchip,
    onchip_reference,
)

TILE, MAX_ROW = 64, 16384  # onchip_select.cc's tiles; onchip::kMaxRow


def chunk_of(n: int, cl: int) -> int:
    """Columns a CTA: whole tiles, as LaunchOnChipSelectForTest (and the GPU kernel) splits."""
    tiles = -(-n // TILE)
    return max(-(-tiles // cl), 1) * TILE


def block_tables(rng, rows: int, n: int) -> np.ndarray:
    """Each row's candidate blocks: a random permutation of 4x the blocks needed (even rows), or
    an increasing sequence with gaps (odd rows), so the position map is not the identity."""
    nb = -(-n // 8)
    out = np.empty((rows, nb), np.int32)
    for r in range(rows):
        if r % 2:
            out[r] = np.cumsum(rng.integers(1, 6, nb)) - 1
        else:
            out[r] = rng.permutation(4 * nb)[:nb]
    return out


def check(exe, rng, scores, lens, k: int, cl: int) -> None:
    """The stand-in's output (poisoned before the launch) equals the reference exactly."""
    scores = np.asarray(scores, np.float32)
    blocks = block_tables(rng, *scores.shape)
    status, got = emulate_onchip(exe, scores, lens, k, blocks, cl)
    assert_rows_equal(
        status, got, onchip_reference(scores, lens, k, blocks), f"lens {np.asarray(lens).tolist()}:"
    )


def edge_lengths(n: int, k: int, cl: int) -> list[int]:
    """0, 1, 7, 8, 9, k - 1, k, k + 1, the whole row, n - 1, one CTA's chunk exactly and one
    past it, and one that leaves the last CTAs without keys (where the cluster has them)."""
    chunk = chunk_of(n, cl)
    edges = [0, 1, 7, 8, 9, k - 1, k, k + 1, n, n - 1, chunk, chunk + 1, (cl - 1) * chunk - 5]
    return sorted({x for x in edges if 0 <= x <= n})


KINDS = ("random", "ties", "special", "equal", "descending")


def mixed_rows(rng, rows: int, n: int) -> np.ndarray:
    """Rows of the factories' kinds in turn (random, few distinct values, NaN / -inf / +inf /
    -0 mixed in, all equal, sorted)."""
    return np.concatenate([make_scores(rng, 1, n, KINDS[r % len(KINDS)]) for r in range(rows)])


# (cluster, k): clusters of 1-16 CTAs (powers of two or not) with k of 1, 64, 512 and 2048 over
# them (a launch a pair)
PAIRS = [(1, 1), (1, 64), (1, 512), (1, 2048), (2, 64), (3, 2048), (4, 1), (5, 512), (16, 64)]


@pytest.mark.parametrize("cl,k", PAIRS, ids=[f"cl{c}-k{k}" for c, k in PAIRS])
def test_lengths_at_the_edges(simt_topk, rng, cl, k):
    """Every edge length on rows of every kind; n not a multiple of a CTA's 64-column tiles,
    and the scores past a row's length +inf, which only a read past it would take."""
    n = max(k + 2, 2 * TILE * cl) + 37
    lens = np.array(edge_lengths(n, k, cl), np.int32)
    if cl == 16:  # 16 CTAs a row: the lengths that matter most
        lens = np.array(sorted({0, 1, k, k + 1, n, chunk_of(n, cl) + 1}), np.int32)
    s = mixed_rows(rng, len(lens), n)
    s[np.arange(n)[None] >= lens[:, None]] = np.inf
    check(simt_topk, rng, s, lens, k, cl)


def special_rows(rng, n: int, k: int, chunk: int) -> np.ndarray:
    """Ties and the keys that are never selected, over CTA boundaries."""
    rows = []
    rows.append(np.full(n, 0.75))  # all equal: the k-th key's ties span every CTA
    tie = rng.standard_normal(n)  # many equal values across each CTA boundary
    for b in [n // 2, *range(chunk, n, chunk)]:
        tie[max(b - 3 * k // 4, 0) : b + k // 2] = 2.5
    rows.append(tie)
    rows.append(rng.integers(0, 3, n).astype(np.float64))  # few values: ties at the k-th key
    runs = rng.standard_normal(n)  # NaN and -inf runs, across CTA boundaries
    runs[n // 8 : n // 2] = np.nan
    runs[n // 2 : 3 * n // 4] = -np.inf
    runs[n - min(chunk, n) // 3 :] = np.nan
    rows.append(runs)
    zeros = np.where(rng.random(n) < 0.5, 0.0, -0.0)  # +0 and -0 tie
    zeros[rng.choice(n, 3, replace=False)] = [1.0, -1.0, -0.5]
    rows.append(zeros)
    few = np.full(n, np.nan)  # fewer valid keys than k
    pick = rng.choice(n, max(k // 2, 1), replace=False)
    few[pick] = rng.integers(-2, 2, len(pick))
    few[rng.choice(n, n // 3, replace=False)] = -np.inf
    rows.append(few)
    rows.append(np.where(rng.random(n) < 0.5, np.nan, -np.inf))  # nothing valid
    return np.array(rows, np.float32)


@pytest.mark.parametrize("cl,k", [(1, 512), (2, 64), (4, 2048), (12, 64)])
def test_ties_nan_inf_and_zeros(simt_topk, rng, cl, k):
    n = max(3 * k, 5 * TILE * cl) - 11
    chunk = chunk_of(n, cl)
    s = special_rows(rng, n, k, chunk)
    if cl > 8:  # many CTAs a row: the ties and the NaN / -inf runs
        s = s[[1, 2, 3, 5]]
    lens = np.full(len(s), n, np.int32)
    lens[1] = n - chunk // 2  # a tie run cut by the length
    check(simt_topk, rng, s, lens, k, cl)


@pytest.mark.parametrize("cl,k", [(1, 64), (2, 2048), (4, 512)])
def test_kth_key_found_at_each_digit_pass(simt_topk, rng, cl, k):
    n = max(2 * k + 200, 3 * TILE * cl)
    s = np.array([digit_row(rng, n, k, stop) for stop in (0, 1, 2, 3, 0, 2)])
    check(simt_topk, rng, s, np.full(len(s), n, np.int32), k, cl)


@pytest.mark.parametrize(
    "cl,n,k,kinds",
    [
        (1, MAX_ROW, 2048, ("random", "ties")),  # one CTA, the widest row
        (15, MAX_ROW - 100, 2048, ("equal",)),  # all tied, over 15 CTAs' chunks
        (16, MAX_ROW, 512, ("random",)),
    ],
    ids=["cl1-16k", "cl8-16k", "cl16-16k"],
)
def test_wide_rows(simt_topk, rng, cl, n, k, kinds):
    s = np.concatenate([make_scores(rng, 1, n, kind) for kind in kinds])
    lens = np.full(len(s), n, np.int32)
    check(simt_topk, rng, s, lens, k, cl)


@pytest.mark.parametrize(
    "cl,n,k",
    [(1, MAX_ROW + 1, 8), (16, MAX_ROW + 1, 8), (0, 256, 8), (17, 4096, 8), (2, 256, 0)],
    ids=["row-too-wide", "row-too-wide-cl16", "cl0", "cl17", "k0"],
)
def test_launcher_refuses(simt_topk, rng, cl, n, k):
    """Rows past onchip::kMaxRow keys, clusters of other than 1-16 CTAs, and k < 1 are refused
    before anything runs."""
    s = rng.standard_normal((2, n)).astype(np.float32)
    status, got = emulate_onchip(simt_topk, s, [n, n], k, block_tables(rng, 2, n), cl)
    assert status != 0
    assert (got == UNWRITTEN).all()


# ------------------------------------------------------------------------------------- mutants
HEADER = ROOT / "cuda" / "smxx_onchip_select.cuh"
# (what, the text of the header, its replacement): each breaks the select in a way the cases
# above must see.
MUTANTS = [
    ("ties-not-capped", "out.Put(g + min(e, need), i);", "out.Put(g + e, i);"),
    (
        "keys-kept-local",
        "(rank == 0 ? keys : cluster.map_shared_rank(keys, 0)) + col",
        "keys + col",
    ),
    (
        "no-gather-barrier",
        "    cluster.sync();\n  }\n  DSV41_STAMP(4);",
        "    __syncthreads();\n  }\n  DSV41_STAMP(4);",
    ),
    ("bin-start-taken", "thresh = topk::Below(prefix << 21);", "thresh = prefix << 21;"),
    ("bin-end-wrong", "k_rem <= digit_above + count)", "k_rem < digit_above + count)"),
    ("digit-scan-inclusive", "WarpInclusiveScan(count) - count;", "WarpInclusiveScan(count);"),
    ("groups-wrong", "kBins / 2 + (key >> 26)]", "kBins / 2 + (key >> 27)]"),
    ("counts-not-pushed", "if (counts[i] != 0) atomicAdd", "if (false) atomicAdd"),
    ("counts-half-swapped", "1u << ((key >> 17) & 16)", "1u << ((key >> 16) & 16)"),
    ("all-ties-not-taken", "thresh -= 1, need = 0;", "need = 0;"),
    ("warps-before-inclusive", "lane < warp ? uint32_t", "lane <= warp ? uint32_t"),
    ("one-tie-too-many", "& 1u) && e < need) {", "& 1u) && e <= need) {"),
    ("past-the-keys", "key[j] = i < hi ? keys[i] : topk::kExcluded;", "key[j] = keys[i];"),
    ("candidates-out-of-order", "count + __popc(taken & lanes_below)]", "count + lane]"),
    (
        "candidates-above-the-bin",
        "max(uint32_t(bin) << 21, 1u)",
        "max((uint32_t(bin) + 1) << 21, 1u)",
    ),
    ("slots-not-advanced", "g0 += __popc(gt), e0 += __popc(eq);", "e0 += __popc(eq);"),
    ("ties-not-advanced", "g0 += __popc(gt), e0 += __popc(eq);", "g0 += __popc(gt);"),
]


def _mutant_cases(exe, seed: int) -> None:
    """A few of the cases above, on `exe`: one launch of rows whose k-th key is found at each
    pass, one of ties, one of a sorted row (a warp's candidates past 32) and a random one (four
    CTAs a row)."""
    rng = np.random.default_rng(seed)
    k, cl = 64, 4
    n = 3 * TILE * cl + 37
    lens = np.full(4, n, np.int32)
    check(exe, rng, [digit_row(rng, n, k, stop) for stop in (0, 1, 2, 3)], lens, k, cl)
    check(exe, rng, special_rows(rng, n, k, chunk_of(n, cl))[:3], lens[:3], k, cl)
    sorted_and_random = [make_scores(rng, 1, n, kind)[0] for kind in ("descending", "random")]
    check(exe, rng, sorted_and_random, lens[:2], k, cl)


def test_mutants_are_caught(simt_topk, rng, tmp_path):
    assert_mutants_caught(
        simt_topk, rng, tmp_path, HEADER, MUTANTS, "onchip_select.cc", _mutant_cases
    )
