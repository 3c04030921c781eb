"""The short-row select's cluster exchange (cuda/smxx_short_topk.cu) on the CPU stand-in: each
CTA adds its nonzero counts of a pass into every CTA's sums, and every CTA reads the cluster's
histogram from its own shared memory. Rows of two CTAs whose k-th key is found at each digit
pass, ties and random scores, against the oracle; and mutants of the exchange, each of which
those rows catch. (tests/test_topk.py runs the select at every width through the public op.)"""

from __future__ import annotations

import numpy as np
from selection import ROOT, digit_row, emulate_equals_oracle, mutants_survived

SOURCE = ROOT / "cuda" / "smxx_short_topk.cu"
N = 16384 + 37  # two CTAs a row (kShortChunk), the second holding 37 + a warp's padding


def _rows(rng, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose k-th key is found at pass 1, 2 or 3 or at the ties, a row of one value but a
    few, and a random one; full lengths but one cut inside the second CTA."""
    rows = [digit_row(rng, N, k, stop) for stop in (0, 1, 2, 3)]
    flat = np.full(N, 0.5, np.float32)
    flat[rng.choice(N, 7, replace=False)] = 2.0
    rows += [flat, rng.standard_normal(N).astype(np.float32)]
    lens = np.full(len(rows), N, np.int32)
    lens[-1] = N - 20
    return np.stack(rows), lens


def _check(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = 64
    scores, lens = _rows(rng, k)
    emulate_equals_oracle(exe, "short", scores, lens, k)


def test_two_cta_rows_equal_the_oracle(simt_topk, rng):
    _check(simt_topk, int(rng.integers(1 << 30)))


# (what, the text of the source, its replacement): each breaks the exchange.
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
    ("single-counts-dropped", "if (c != 0) {", "if (c > 1) {"),
    (
        "sums-not-zeroed",
        "for (int i = threadIdx.x; i < 3 * kBins; i += kThreads) (&sh.sum[0][0])[i] = 0;",
        "",
    ),
    ("own-counts-scanned", "    h = s;\n", ""),
]


def test_mutants_of_the_exchange_are_caught(simt_topk, rng, tmp_path):
    """Each mutant (an edited copy of the source, shadowing cuda/ when only short_topk.cc is
    compiled again) fails the rows that the source itself passes."""
    survived = mutants_survived(
        simt_topk, tmp_path, SOURCE, MUTANTS, "short_topk.cc", _check, int(rng.integers(1 << 30))
    )
    assert not survived, f"mutants not caught: {survived}"
