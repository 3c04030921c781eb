"""The short select writing a top-C's candidate table itself (cuda/smxx_short_topk.cu, TableSink:
what the fused publish runs where `ShortTopkWritesTable` holds) on the CPU stand-in, against the
oracle's top-C made into a table by the reference sort: rows of block scores with NaN / -inf
runs, ties, lengths 0, 1, 7, 8, 9 positions, exactly C blocks, C·8 positions and one block past,
page tables holding invalid ids (-1, past int32's slots), pages of 8 blocks (a shift) and of 3 (a
division); every output poisoned before the launch. Mutants of the table's steps are caught.
(tests/test_gpu_step.py runs the fused publish against the ops one by one on the GPU.)"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import oracle
from selection import ROOT, _launch, mutants_survived

from dsv41_jax.blocks import reference as blocks_reference

SOURCE = ROOT / "cuda" / "smxx_short_topk.cu"
B = 8
UNWRITTEN = 0x7EADBEEF


def emulate_table(exe, scores, lens, c, block_table, page_size):
    """Runs the short select with TopkArgs::table on the stand-in; (cudaError, blocks, count,
    valid_lens, physical)."""
    scores, table = np.asarray(scores, np.float32), np.asarray(block_table, np.int32)
    rows, n = scores.shape
    header = [rows, n, c, B, table.shape[1], page_size]
    status, out = _launch(exe, "short-table", header, [scores, np.asarray(lens, np.int32), table])
    blocks, count, valid, physical = np.split(out.view(np.int32), np.cumsum([rows * c, rows, rows]))
    return status, blocks.reshape(rows, c), count, valid, physical.reshape(rows, c)


def _rows(rng, n: int, c: int):
    """Block-score rows and their lengths in positions (see the module docstring)."""
    scores = rng.standard_normal((11, n)).astype(np.float32)
    scores[1, 10:60] = np.nan
    scores[2, 5:30] = -np.inf
    scores[3] = 1.0  # all tied: the lowest blocks and the newest
    scores[4] = np.where(rng.random(n) < 0.5, 0.0, -0.0)
    lens = [n * B - 3, 8 * 200 + 1, 8 * 150, n * B, 0, 1, 7, 8, 9, c * B, c * B + 1]
    return scores, np.minimum(np.asarray(lens, np.int32), n * B)


def _pages(rng, rows: int, max_pages: int, page_size: int) -> np.ndarray:
    """Page tables: a permutation of pages each, with an unmapped page (-1) and one whose slots
    pass int32 in every row."""
    table = np.stack([rng.permutation(4 * max_pages)[:max_pages] for _ in range(rows)])
    table[:, rng.integers(max_pages)] = -1
    table[:, rng.integers(max_pages)] = np.iinfo(np.int32).max // page_size + 1
    return table.astype(np.int32)


def _check(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Rows of one tile a lane (512, 2100 blocks; pages of 8 and of 3 blocks), two (6000) and
    # four (16384: V4.1's 128K positions), and fewer blocks than C (128).
    shapes = ((64, 64, 256), (700, 24, 2048), (750, 64, 512), (2048, 64, 2048), (16, 64, 2048))
    for max_pages, page_size, c in shapes:
        n = max_pages * page_size // B  # the table's condition: the pages cover the n blocks
        scores, lens = _rows(rng, n, c)
        table = _pages(rng, len(lens), max_pages, page_size)
        status, *got = emulate_table(exe, scores, lens, c, table, page_size)
        assert status == 0, f"launch error {status}"
        chosen = np.stack([oracle.candidate_row(s, int(x), c, B) for s, x in zip(scores, lens)])
        want = blocks_reference.sort_candidate_blocks(
            jnp.asarray(chosen), jnp.asarray(lens), jnp.asarray(table), B, page_size
        )
        fields = ("blocks", "count", "valid_lens", "physical")
        for name, g, w in zip(
            fields, got, (want.blocks, want.count, want.valid_lens, want.physical)
        ):
            assert not (g == UNWRITTEN).any(), f"{name}: an element was never written"
            np.testing.assert_array_equal(g, np.asarray(w), err_msg=f"{name}, {n} blocks")


def test_the_table_equals_the_oracle_top_c_sorted(simt_topk, rng):
    _check(simt_topk, int(rng.integers(1 << 30)))


def test_calls_the_table_cannot_take_are_refused(simt_topk, rng):
    """Pages that do not cover exactly the row's blocks: an error, nothing written."""
    scores = rng.standard_normal((2, 512)).astype(np.float32)
    table = np.zeros((2, 65), np.int32)  # 65 pages of 64: 520 blocks, not 512
    status, blocks, *_ = emulate_table(simt_topk, scores, [100, 200], 64, table, 64)
    assert status != 0
    assert (blocks == UNWRITTEN).all()


# (what, the text of the source, its replacement): each breaks a step of the table's output.
MUTANTS = [
    ("pad-as-ids", "blocks[slot] = kTablePad, physical[slot] = -1;", "blocks[slot] = -1;"),
    ("tail-whole-block", "(len - 1) % block_size + 1;", "block_size;"),
    ("count-of-k", "*count = n;", "*count = n + (n > 0);"),
    (
        "pages-of-the-first-row",
        "a.table.block_table + row * a.table.max_pages",
        "a.table.block_table",
    ),
    (
        "pages-short-by-one",
        "(len + a.table.page_size - 1) / a.table.page_size;",
        "len / a.table.page_size;",
    ),
]


def test_mutants_of_the_table_are_caught(simt_topk, rng, tmp_path):
    survived = mutants_survived(
        simt_topk, tmp_path, SOURCE, MUTANTS, "short_topk.cc", _check, int(rng.integers(1 << 30))
    )
    assert not survived, f"mutants not caught: {survived}"
