"""The short-row select's rows of one CTA (cuda/smxx_short_topk.cu, ShortTopkCtaKernel) on the
CPU stand-in: keys made by the thread's tiles (TileKeys: positions, candidate blocks with the
newest pinned, bf16), pass 1 counted into shared memory, each warp's candidates kept from its
lanes' keys (TileCandidates), then the on-chip select. Rows whose k-th key is found at each
digit pass, ties, NaN / -inf runs and short lengths against the oracle; and mutants of the
kernel's own steps, each of which those rows catch. (tests/test_topk.py runs the select at
every width through the public op; tests/test_onchip_select.py the on-chip select's steps.)"""

from __future__ import annotations

import numpy as np
from selection import (
    ROOT,
    assert_mutants_caught,
    bf16_rows_equal_the_oracle,
    candidate_rows_equal_the_oracle,
    digit_row,
    emulate_equals_oracle,
)

SOURCE = ROOT / "cuda" / "smxx_short_topk.cu"
N = 16384  # one CTA: kShortChunk


def _rows(rng, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose k-th key is found at pass 1, 2 or 3 or at the ties, a row of one value but a
    few, a random row with NaN and -inf runs, a row of +0 and -0 but a few, and random rows cut
    short (lengths 0, 1, 7, k + 1 and one inside a warp's last tile)."""
    rows = [digit_row(rng, n, k, stop) for stop in (0, 1, 2, 3)]
    flat = np.full(n, 0.5, np.float32)
    flat[rng.choice(n, 7, replace=False)] = 2.0
    special = rng.standard_normal(n).astype(np.float32)
    special[100:140], special[900:905] = np.nan, -np.inf
    zeros = np.where(rng.random(n) < 0.5, 0.0, -0.0).astype(np.float32)  # one key, ties
    zeros[rng.choice(n, 7, replace=False)] = 2.0
    rows += [flat, special, zeros]
    lens = [n] * len(rows)
    for length in (0, 1, 7, k + 1, n - 3):
        rows.append(rng.standard_normal(n).astype(np.float32))
        lens.append(length)
    return np.stack(rows), np.asarray(lens, np.int32)


def _check(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = 64
    scores, lens = _rows(rng, N, k)  # float rows: four tiles a lane past 8192 scores
    emulate_equals_oracle(exe, "short", scores, lens, k, "float")
    scores, lens = _rows(rng, 8192, 64)  # two tiles a lane: 4097-8192 scores
    emulate_equals_oracle(exe, "short", scores, lens, 64, "float, 8192")
    scores, lens = _rows(rng, 5000, 512)  # 20 warps of keys, the last part-filled
    emulate_equals_oracle(exe, "short", scores, lens, 512, "float, 5000")
    scores, lens = _rows(rng, 4096, 512)  # one to 4096
    emulate_equals_oracle(exe, "short", scores, lens, 512, "float, 4096")
    scores, lens = _rows(rng, 2048, 300)
    emulate_equals_oracle(exe, "short", scores, lens, 300, "float, 2048")
    candidate_rows_equal_the_oracle(exe, rng, 3000, 256)  # one tile a lane
    candidate_rows_equal_the_oracle(exe, rng, 12000, 2048)  # four
    bf16_rows_equal_the_oracle(exe, rng, N, 64)  # many ties
    bf16_rows_equal_the_oracle(exe, rng, 4096, 64)  # bf16: one tile a lane to 8192 scores


def test_one_cta_rows_equal_the_oracle(simt_topk, rng):
    _check(simt_topk, int(rng.integers(1 << 30)))


# (what, the text of the source, its replacement): each breaks a step of the one-CTA rows.
MUTANTS = [
    (
        "candidates-tile-offset-dropped",
        "SlotCursor at(slots + base + count + int32_t(",
        "SlotCursor at(slots + base + int32_t(",
    ),
    (
        "candidates-column-of-the-lane-wrong",
        "const int32_t p = p0 + 32 * kVec * j + kVec * lane;",
        "const int32_t p = p0 + 32 * kVec * j + lane;",
    ),
    (
        "candidates-bin-start-dropped",
        "at.PutIfAbove<0>(kk, lowest - 1,",
        "at.PutIfAbove<0>(kk, lowest,",
    ),
    (
        "candidates-tile-field-narrow",
        "kMask = (1u << kBits) - 1u;",
        "kMask = (1u << (kBits - 1)) - 1u;",
    ),
    (
        "excluded-counted-in-bin-0",
        "atomicAdd(key[i] != kExcluded ? &counts[key[i] >> 21] : lane_dump, 1u);",
        "atomicAdd(&counts[key[i] >> 21], 1u);",
    ),
    (
        "part-filled-warp-not-counted",
        "if (int64_t(warp) * kSpan < mine) CountTopDigits",
        "if (int64_t(warp + 1) * kSpan <= mine) CountTopDigits",
    ),
    (
        "one-tile-rows-too-long",
        "if (chunk <= kTileRow<T>) kernel",
        "if (chunk <= 2 * kTileRow<T>) kernel",
    ),
    (
        "two-tile-rows-too-long",
        "if (chunk <= 2 * kTileRow<T>) kernel",
        "if (chunk <= 4 * kTileRow<T>) kernel",
    ),
    (
        "spread-candidates-at-the-chunk-segment",
        "candidates{warp * kSpan, key}",
        "candidates{warp * kSegment, key}",
    ),
    ("groups-not-summed", "  onchip::SumGroups<kThreads>(sh.counts);\n", ""),
    (
        "keys-stored-at-the-tile-start",
        "&sh.keys[seg + 32 * kVec * j + e]",
        "&sh.keys[seg + 32 * kVec * j]",
    ),
    ("newest-not-pinned", "i == pinned ? topk::kPinned : kk", "kk"),
    ("past-the-chunk-kept", "i >= left ? kExcluded : i == pinned", "i == pinned"),
    (
        "nan-blocks-excluded",
        "x > -INFINITY ? topk::OrderedKey(x) : topk::kLowest",
        "x > -INFINITY ? topk::OrderedKey(x) : kExcluded",
    ),
]


def test_mutants_of_the_one_cta_rows_are_caught(simt_topk, rng, tmp_path):
    assert_mutants_caught(simt_topk, rng, tmp_path, SOURCE, MUTANTS, "short_topk.cc", _check)


def test_signed_zeros_one_key_mutant_is_caught(simt_topk, rng, tmp_path):
    """The keys' header (cuda/smxx_topk_keys.cuh) with -0 and +0 made two keys: the row of
    zeros, whose k-th key falls among them, must then differ from the oracle."""
    mutant = ("zeros-two-keys", "__float_as_uint(v + 0.0f)", "__float_as_uint(v)")
    source = ROOT / "cuda" / "smxx_topk_keys.cuh"
    assert_mutants_caught(simt_topk, rng, tmp_path, source, [mutant], "short_topk.cc", _check)
