"""What the short select writes for the fused publish beside its selection (cuda/
smxx_short_topk.cu), on the CPU stand-in, every output poisoned before the launch:
- the top-k's block maxima (ShortOutputs::block_max, where `ShortTopkWritesBlockMax` holds), bitwise
  the block-amax kernel's (the newest block pinned) on rows of one CTA and of clusters of 2 and
  8, with NaN / -inf / +inf runs, signed zeros and lengths 0, 1, 7, 8, 9 and cut inside a block;
- the top-C's candidate table (ShortOutputs::table, where `ShortTopkWritesTable` holds) against the
  oracle's top-C made into a table by the reference sort: NaN / -inf runs, ties, lengths 0, 1, 7,
  8, 9 positions, exactly C blocks, C·8 positions and one block past, page tables holding invalid
  ids (-1, past int32's slots), pages of 8 blocks (a shift) and of 3 (a division).
Mutants of both are caught. (tests/test_fused.py runs the fused publish against the ops one by
one on the GPU.)"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import oracle
from selection import (
    ROOT,
    UNWRITTEN,
    _launch,
    assert_mutants_caught,
    assert_written,
    emulate,
    emulate_page_kernel,
    emulate_sort,
    table_fields,
)

from dsv41_jax import ordering
from dsv41_jax.blocks import reference as blocks_reference

SOURCE = ROOT / "cuda" / "smxx_short_topk.cu"
B = 8
K = 64  # the top-k's k beside the table of every block


def emulate_table(exe, scores, lens, c, block_table, page_size):
    """Runs the short select with ShortOutputs::table on the stand-in; (cudaError, blocks, count,
    valid_lens, physical)."""
    scores, table = np.asarray(scores, np.float32), np.asarray(block_table, np.int32)
    rows, n = scores.shape
    header = [rows, n, c, B, table.shape[1], page_size]
    status, out = _launch(exe, "short-table", header, [scores, np.asarray(lens, np.int32), table])
    return status, *table_fields(out, rows, c)[0]


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
        chosen = np.stack([oracle.candidate_row(s, int(x), c, B) for s, x in zip(scores, lens)])
        want = blocks_reference.sort_candidate_blocks(
            jnp.asarray(chosen), jnp.asarray(lens), jnp.asarray(table), B, page_size
        )
        fields = ("blocks", "count", "valid_lens", "physical")
        for name, g, w in zip(
            fields, got, (want.blocks, want.count, want.valid_lens, want.physical)
        ):
            assert_written(status, g, f"{name}: ")
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


def _score_rows(rng, rows: int, n: int) -> np.ndarray:
    """Scores of few values (ties), NaN / -inf / +inf runs, signed zeros (a block's first
    largest score is -0 or +0)."""
    scores = rng.integers(-3, 3, (rows, n)).astype(np.float32)
    pick = rng.random((rows, n))
    scores[pick < 0.1] = np.nan
    scores[(pick >= 0.1) & (pick < 0.15)] = -np.inf
    scores[(pick >= 0.15) & (pick < 0.16)] = np.inf
    scores[0, 16:48] = np.nan  # whole blocks of NaN: -inf
    scores[(pick >= 0.5) & (pick < 0.8)] = -0.0
    return scores


def _check_block_max(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # One CTA (two and four tiles a lane), clusters of 2 (chunks of 10240: a CTA's tiles reach
    # past its chunk) and of 8.
    for n, k in ((5000, 64), (16384, 512), (20000, 512), (131072, 512)):
        rows = 9 if n <= 20000 else 3
        scores = _score_rows(rng, rows, n)
        edges = [0, 1, 7, 8, 9, n - 3, n, 10241, 4097]
        lens = np.asarray(edges[: rows - 1] + [int(rng.integers(n + 1))], np.int32)
        status, out = _launch(
            exe,
            "short-amax",
            [rows, n, k, B, 0, 0, 0, 0, 0],
            [scores, lens, np.zeros(rows, np.int32)],
        )
        assert status == 0, f"launch error {status}"
        got = out.view(np.int32)
        top, block_max = got[: rows * k].reshape(rows, k), got[rows * k :].view(np.float32)
        nb = -(-n // B)
        block_max = block_max.reshape(rows, nb)
        want = emulate_page_kernel(
            exe, "amax", (rows, n, n, nb, B, 1), (scores, lens), np.float32, (rows, nb)
        )
        assert not (block_max.view(np.uint32) == 0x7E7E7E7E).any(), "a block max never written"
        np.testing.assert_array_equal(
            block_max.view(np.uint32), want.view(np.uint32), err_msg=f"block maxima, n {n}"
        )
        for r in range(rows):  # the selection itself is untouched
            want_top = oracle.topk_row(scores[r], min(int(lens[r]), n), k)
            np.testing.assert_array_equal(top[r], want_top, err_msg=f"top-k row {r}, n {n}")


def test_block_maxima_equal_the_amax_kernel(simt_topk, rng):
    _check_block_max(simt_topk, int(rng.integers(1 << 30)))


def test_block_maxima_the_select_cannot_take_are_refused(simt_topk, rng):
    """Blocks of 4 (a lane's tile alone): an error, before anything runs."""
    scores = rng.standard_normal((2, 512)).astype(np.float32)
    status, out = emulate(simt_topk, "short", scores, [100, 200], 8)  # the select alone: runs
    assert status == 0
    status, _ = _launch(
        simt_topk,
        "short-amax",
        [2, 512, 8, 4, 0, 0, 0, 0, 0],
        [scores, np.asarray([100, 200], np.int32), np.zeros(2, np.int32)],
    )
    assert status != 0


# (what, the text of the source, its replacement): each breaks a step of the block maxima.
BLOCK_MAX_MUTANTS = [
    ("newest-not-pinned", "b == newest ? INFINITY : later", "later"),
    ("second-lane-ignored", "later > best ? later : best", "best"),
    ("last-of-the-largest", "later > best ? later : best", "later >= best ? later : best"),
    ("past-the-chunk-written", "if (even && at < chunk && b < nb)", "if (even && b < nb)"),
    (
        "tile-offset-of-one-lane",
        "const int64_t at = seg + 32 * 4 * j,",
        "const int64_t at = seg + 4 * j,",
    ),
]


def test_mutants_of_the_block_maxima_are_caught(simt_topk, rng, tmp_path):
    assert_mutants_caught(
        simt_topk, rng, tmp_path, SOURCE, BLOCK_MAX_MUTANTS, "short_topk.cc", _check_block_max
    )


# (what, the text of the source, its replacement): each breaks a step of the table's output.
MUTANTS = [
    ("pad-as-ids", "blocks[slot] = kTablePad, physical[slot] = -1;", "blocks[slot] = -1;"),
    ("tail-whole-block", "(len - 1) % block_size + 1;", "block_size;"),
    ("count-of-k", "*count = n;", "*count = n + (n > 0);"),
    (
        "pages-of-the-first-row",
        "x.table.block_table + row * x.table.max_pages",
        "x.table.block_table",
    ),
    (
        "pages-short-by-one",
        "(len + x.table.page_size - 1) / x.table.page_size;",
        "len / x.table.page_size;",
    ),
]


def test_mutants_of_the_table_are_caught(simt_topk, rng, tmp_path):
    assert_mutants_caught(simt_topk, rng, tmp_path, SOURCE, MUTANTS, "short_topk.cc", _check)


def emulate_every_block(exe, scores, lens, k, c, block_table, page_size):
    """Runs the short select's top-k with ShortOutputs::every_block on the stand-in; (cudaError,
    top-k [rows, k], (blocks, count, valid_lens, physical))."""
    scores, table = np.asarray(scores, np.float32), np.asarray(block_table, np.int32)
    rows, n = scores.shape
    header = [rows, n, k, c, B, table.shape[1], page_size]
    status, out = _launch(exe, "short-every", header, [scores, np.asarray(lens, np.int32), table])
    table_out, top = table_fields(out, rows, c)
    return status, top.reshape(rows, k), table_out


def _want_every_block(lens, c, table, page_size):
    """The reference sort of every block (`ordering.every_block`) of each row."""
    lens = jnp.asarray(np.asarray(lens, np.int32))
    ids = ordering.every_block(lens, c, B)  # ids past the page table: the sort drops them
    want = blocks_reference.sort_candidate_blocks(ids, lens, jnp.asarray(table), B, page_size)
    return [np.asarray(x) for x in (want.blocks, want.count, want.valid_lens, want.physical)]


def _check_every_block(exe, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # (positions a row, max_pages, page_size, C): V4.1's 16K rows (C·8 positions), a page table
    # wider than the logits (the table clamps the lengths to the page table, the top-k to the
    # logits), pages of 3 blocks (a division), and C smaller than a row's blocks (the table
    # keeps the first C).
    for n, max_pages, page_size, c in (
        (16384, 256, 64, 2048),
        (300, 6, 64, 64),
        (600, 26, 24, 80),
        (512, 8, 64, 16),
    ):
        lens = [n, n - 3, 0, 1, 7, 8, 9, -5, max_pages * page_size + 9, int(rng.integers(n + 1))]
        lens = np.asarray(lens, np.int32)
        scores = _score_rows(rng, len(lens), n)
        table = _pages(rng, len(lens), max_pages, page_size)
        status, top, got = emulate_every_block(exe, scores, lens, K, c, table, page_size)
        want = _want_every_block(lens, c, table, page_size)
        for name, g, w in zip(("blocks", "count", "valid_lens", "physical"), got, want):
            assert_written(status, g, f"{name}: ")
            np.testing.assert_array_equal(g, w, err_msg=f"{name}, rows of {n}")
        for r, length in enumerate(lens):  # the selection itself is untouched
            want_top = oracle.topk_row(scores[r], min(max(int(length), 0), n), K)
            np.testing.assert_array_equal(top[r], want_top, err_msg=f"top-k row {r}, n {n}")
        # The sort of every block (no ids: SortBlocksArgs::selected null) builds the same table.
        status, sorted_ = emulate_sort(exe, None, lens, table, B, page_size, c)
        for name, g, w in zip(("blocks", "count", "valid_lens", "physical"), sorted_, want):
            assert_written(status, g, f"sort {name}: ")
            np.testing.assert_array_equal(g, w, err_msg=f"sort {name}, {n}")


def test_the_table_of_every_block_equals_the_sort_of_every_block(simt_topk, rng):
    _check_every_block(simt_topk, int(rng.integers(1 << 30)))


def test_tables_of_every_block_the_select_cannot_take_are_refused(simt_topk, rng):
    """Rows of more than one CTA, or pages of part of a block: an error, nothing written."""
    scores = rng.standard_normal((2, 20000)).astype(np.float32)
    table = np.zeros((2, 313), np.int32)
    status, top, (blocks, *_) = emulate_every_block(simt_topk, scores, [9, 9], 8, 64, table, 64)
    assert status != 0
    assert (blocks == UNWRITTEN).all() and (top == UNWRITTEN).all()
    status, top, (blocks, *_) = emulate_every_block(
        simt_topk, scores[:, :512], [9, 9], 8, 64, table[:, :44], 12
    )
    assert status != 0
    assert (blocks == UNWRITTEN).all() and (top == UNWRITTEN).all()


# (what, the text of the source, its replacement): each breaks a step of the table of every block.
EVERY_BLOCK_MUTANTS = [
    ("unclamped-length", "min(max(int64_t(raw_len), int64_t(0)), cap)", "max(raw_len, 0)"),
    ("no-cap-at-c", "int32_t(min(int64_t(nblocks), t.c))", "nblocks"),
    ("tail-whole-block", "n == nblocks ? (len - 1) % block_size + 1 : block_size", "block_size"),
    ("pad-as-minus-one", "used ? i : kTablePad", "used ? i : -1"),
    ("pages-of-the-first-row", "t.block_table + row * t.max_pages", "t.block_table"),
    ("empty-row-valid-length", "t.valid_lens[row] = n == 0 ? 0 : ", "t.valid_lens[row] = "),
]


def test_mutants_of_the_table_of_every_block_are_caught(simt_topk, rng, tmp_path):
    assert_mutants_caught(
        simt_topk, rng, tmp_path, SOURCE, EVERY_BLOCK_MUTANTS, "short_topk.cc", _check_every_block
    )
