"""The filter-first select (cuda/smxx_filter_topk.cu) on the CPU stand-in, path by path: rows of 4
and of 8 chunks just above the buffer (a sampled bar; the peers store their buffers into the
first CTA's uncut where they fit, and a plateau of ties at the bar makes them not fit, so each
chunk is cut to its top k first), rows of 2 chunks with k = 4096 (no bar: the buffer is cut to
its top k while streaming and the bar rises), keys ascending with position, ties at the k-th key
across chunks, and rows whose large keys sit exactly where the sample looks (the bar lets fewer
than k through: the chunk is streamed again), rows of equal keys (cut with every key tied),
against the oracle; and mutants of those paths, each of which the rows catch; and mutants of
the radix digit step it shares with the cluster select, each of which both selects' rows catch.
(tests/test_topk.py runs the select at every width through the public op.)"""

from __future__ import annotations

import numpy as np
import pytest
from factories import SIGNED_ZERO_ODDS, signed_zero_scores
from selection import ROOT, assert_mutants_caught, emulate_equals_oracle, filter_row

SOURCE = ROOT / "cuda" / "smxx_filter_topk.cu"
SAMPLE = 1024  # keys the kernel samples a chunk, at lo + t * mine // SAMPLE
# (n, k, chunks) -> the kinds of rows run there; the launcher splits a row into `chunks` CTAs.
ROWS = {
    (60000, 512, 4): ("negative", "spread", "trap", "ties", "plateau", "zeros", "equal"),
    (4000, 40, 1): ("equal", "ties", "spread"),  # one CTA, no bar: the buffer is cut once
    (30000, 4096, 2): ("ascending", "ties", "zeros-cut"),
    (104000, 64, 8): ("spread", "plateau"),
}


def _row(rng, kind: str, n: int, k: int, chunks: int) -> np.ndarray:
    """Spread random keys (all negative ones too); keys ascending with position; ties at the k-th
    key across chunks; scores around +-0 (factories.SIGNED_ZERO_ODDS); every score equal;
    fewer large keys than k in the row, all of them where the sample looks; or a plateau of
    3500 ties a chunk above the rest (every chunk's buffer past the sampled bar holds them, 4 or
    8 x 3500 pairs: more than the first CTA's buffer of 12288)."""
    if kind in SIGNED_ZERO_ODDS:
        return signed_zero_scores(rng, n, kind)
    if kind == "equal":  # every key the same: the buffer is cut with every key tied
        return np.full(n, np.float32(rng.standard_normal()))
    if kind == "trap":
        row = np.full(n, -5.0, np.float32)
        mine = n // chunks
        for c in range(chunks):
            sampled = c * mine + (np.arange(SAMPLE) * mine) // SAMPLE
            row[rng.choice(sampled, min(k // chunks * 4 // 5, SAMPLE), replace=False)] = 3.0
        return row
    if kind == "negative":
        return filter_row(rng, "spread", n, k, chunks) - np.float32(4.0)
    return filter_row(rng, kind, n, k, chunks)  # ascending, ties, plateau, spread


def _check(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for (n, k, chunks), kinds in ROWS.items():
        scores = np.stack([_row(rng, kind, n, k, chunks) for kind in kinds])
        lens = np.full(len(kinds), n, np.int32)
        lens[0] -= 1234  # a length cut inside a chunk
        emulate_equals_oracle(exe, "filter", scores, lens, k, f"n={n} k={k} {kinds}:")


def test_filter_paths_equal_the_oracle(simt_topk, rng):
    _check(simt_topk, int(rng.integers(1 << 30)))


# (what, the text of the source, its replacement): each breaks one path.
MUTANTS = [
    ("never-streamed-again", "if (!restream || count >= k || bar.key <= 1) break;", "break;"),
    ("ties-at-the-bar-not-counted", "n += s[j] >= bar.score;", "n += s[j] > bar.score;"),
    ("buffer-overrun", "if (count + round > kCap) {", "if (count + round > kCap + kRound) {"),
    ("a-peer-not-gathered", "if (rank != 0) {  // each peer", "if (rank > 1) {  // each peer"),
    ("chunks-never-cut", "if (c == 0) sh.cut = !fit;", "if (c == 0) sh.cut = false;"),
    ("a-peer-not-counted", "c < cl ? *cluster", "c < cl - 1 ? *cluster"),
    (
        "a-bin-taken-whole-too-soon",
        "if (whole_bin && sh.radix.in_bin == sh.radix.k_rem) break;",
        "if (whole_bin && sh.radix.in_bin >= sh.radix.k_rem) break;",
    ),
]


def test_mutants_of_the_filter_select_are_caught(simt_topk, rng, tmp_path):
    assert_mutants_caught(simt_topk, rng, tmp_path, SOURCE, MUTANTS, "filter_topk.cc", _check)


# What the CUDA selects share (cuda/smxx_block_scan.cuh): the digit search and the in-order
# emission.
SHARED_MUTANTS = [
    ("digit-one-too-low", "k_rem <= above + c[j]) found", "k_rem < above + c[j]) found"),
    (
        "keys-above-miscounted",
        "found = {true, top - j, above, c[j]}",
        "found = {true, top - j, 0, c[j]}",
    ),
    (
        "a-tie-too-many",
        "(is_eq(kk[j]) && eq_rank < need_eq)",
        "(is_eq(kk[j]) && eq_rank <= need_eq)",
    ),
    (
        "ties-not-counted-in-slots",
        "int32_t slot = st.emitted + (before & 0xffff) + min(ties_left, before >> 16);",
        "int32_t slot = st.emitted + (before & 0xffff);",
    ),
]


# The score form of the bar and the loads' fill (cuda/smxx_topk_keys.cuh): the "negative" rows'
# bar is a negative score, the restreamed "trap" rows' bar takes every finite score, and the
# "negative" row's length cut leaves loads past its last chunk's end.
KEY_MUTANTS = [
    ("negative-bars-not-inverted", "k & 0x7fffffffu : ~k);", "k & 0x7fffffffu : k);"),
    ("no-bar-drops-negatives", "return __uint_as_float(0xff7fffffu);", "return 0.0f;"),
    ("loads-past-the-chunk-enter", "return __uint_as_float(0x7fffffffu); }", "return 0.0f; }"),
    (
        "negative-keys-not-inverted",
        "return u ^ (uint32_t(int32_t(u) >> 31) | 0x80000000u);",
        "return u ^ 0x80000000u;",
    ),
]


# The headers above, each with its mutants.
HEADER_MUTANTS = {"smxx_block_scan.cuh": SHARED_MUTANTS, "smxx_topk_keys.cuh": KEY_MUTANTS}


@pytest.mark.parametrize("header", list(HEADER_MUTANTS))
def test_mutants_of_the_shared_headers_are_caught(simt_topk, rng, tmp_path, header):
    assert_mutants_caught(
        simt_topk,
        rng,
        tmp_path,
        ROOT / "cuda" / header,
        HEADER_MUTANTS[header],
        "filter_topk.cc",
        _check,
    )


# The radix digit step of the filter-first and cluster selects (cuda/smxx_radix_digit.cuh): each
# mutant must fail both selects' rows. The cluster's: rows of 40000 over a cluster of CTAs whose
# histograms are summed through distributed shared memory (spread keys, ties at the k-th key
# across CTAs, fewer valid keys than k: all taken), one cut inside a chunk.
DIGIT_MUTANTS = [
    (
        "a-copy-not-summed",
        "for (int c = 0; c < kCopies; ++c) sum += hist[c][bin];",
        "for (int c = 1; c < kCopies; ++c) sum += hist[c][bin];",
    ),
    ("keys-past-the-prefix-counted", "(key & mask) == prefix)", "(key & mask) >= prefix)"),
    ("keys-above-the-bin-still-needed", "st.k_rem = k_rem - d.above;", "st.k_rem = k_rem;"),
]


def _check_cluster(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = 40000, 512
    spread = rng.standard_normal(n).astype(np.float32)
    ties = rng.standard_normal(n).astype(np.float32)
    ties[rng.choice(n, 3 * k, replace=False)] = 9.0
    few = np.full(n, np.nan, np.float32)
    few[rng.choice(n, 300, replace=False)] = rng.standard_normal(300)
    lens = np.full(3, n, np.int32)
    lens[0] -= 1234
    emulate_equals_oracle(exe, "cluster", np.stack([spread, ties, few]), lens, k, "cluster:")


def test_cluster_rows_equal_the_oracle(simt_topk, rng):
    _check_cluster(simt_topk, int(rng.integers(1 << 30)))


@pytest.mark.parametrize(
    "rebuild,check",
    [("filter_topk.cc", _check), ("cluster_topk.cc", _check_cluster)],
    ids=["filter", "cluster"],
)
def test_mutants_of_the_shared_digit_step_are_caught(simt_topk, rng, tmp_path, rebuild, check):
    source = ROOT / "cuda" / "smxx_radix_digit.cuh"
    assert_mutants_caught(simt_topk, rng, tmp_path, source, DIGIT_MUTANTS, rebuild, check)
