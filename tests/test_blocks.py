"""sort_candidate_blocks and the publish pipeline against the loop oracle (block_amax:
test_block_amax.py; select_candidate_blocks: test_candidate_blocks.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from factories import POISON, poison_device_memory
from factories import scores as make_scores

import dsv41_jax as dj


def table_expected(sel, lens, bt, b, p):
    rows = [oracle.table_row(sel[r], int(lens[r]), bt[r], b, p) for r in range(len(lens))]
    return [np.array([row[i] for row in rows]) for i in range(4)]


@pytest.mark.parametrize("c", [1, 5, 32])
def test_sort_candidate_blocks(rng, c):
    b, p, pages = 8, 64, 6
    rows = 9
    lens = np.array([0, 1, 9, 64, 65, 383, 384, 200, 100], np.int32)
    bt = rng.permutation(200)[: rows * pages].reshape(rows, pages).astype(np.int32)
    bt[3, 0] = -1  # a hole in the page table maps to -1
    sel = rng.integers(-1, 50, (rows, c)).astype(np.int32)  # any order, -1, repeats, out of range
    table = dj.sort_candidate_blocks(
        jnp.asarray(sel), jnp.asarray(lens), jnp.asarray(bt), block_size=b, page_size=p
    )
    blocks, count, valid, physical = table_expected(sel, lens, bt, b, p)
    np.testing.assert_array_equal(np.asarray(table.blocks), blocks)
    np.testing.assert_array_equal(np.asarray(table.count), count)
    np.testing.assert_array_equal(np.asarray(table.valid_lens), valid)
    np.testing.assert_array_equal(np.asarray(table.physical), physical)


def test_pipeline_valid_lens_matches_contract_formula(rng):
    b, c, p = 8, 4, 64
    lens = np.array([1, 7, 8, 9, 31, 32, 33, 250], np.int32)
    s = make_scores(rng, len(lens), 256, "random")
    bt = np.tile(np.arange(4, dtype=np.int32), (len(lens), 1))
    amax = dj.block_amax(jnp.asarray(s), jnp.asarray(lens), block_size=b)
    sel = dj.select_candidate_blocks(amax, jnp.asarray(lens), num_candidates=c, block_size=b)
    table = jax.jit(lambda *a: dj.sort_candidate_blocks(*a, block_size=b, page_size=p))(
        sel, jnp.asarray(lens), jnp.asarray(bt)
    )
    count = np.minimum(c, -(-lens // b))
    np.testing.assert_array_equal(np.asarray(table.count), count)
    np.testing.assert_array_equal(
        np.asarray(table.valid_lens), b * (count - 1) + (lens - 1) % b + 1
    )


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: dj.block_amax(jnp.zeros((2, 8)), jnp.zeros(2, jnp.int32), block_size=0),
            "block_size must be a positive int",
        ),
        (lambda: dj.block_amax(jnp.zeros((2, 8)), jnp.full(2, 9, jnp.int32)), "lengths must lie"),
        (
            lambda: dj.select_candidate_blocks(
                jnp.zeros((2, 4)), jnp.zeros(2, jnp.int32), num_candidates=0
            ),
            "num_candidates",
        ),
        (
            lambda: dj.select_candidate_blocks(
                jnp.zeros((2, 4)), jnp.full(2, 33, jnp.int32), num_candidates=2
            ),
            "lengths must lie",
        ),
        (
            lambda: dj.sort_candidate_blocks(
                jnp.zeros((2, 4), jnp.int32),
                jnp.zeros(2, jnp.int32),
                jnp.zeros((2, 1), jnp.int32),
                block_size=8,
                page_size=12,
            ),
            "multiple of block_size",
        ),
        (
            lambda: dj.sort_candidate_blocks(
                jnp.zeros((2, 4), jnp.int32),
                jnp.full(2, 65, jnp.int32),
                jnp.zeros((2, 1), jnp.int32),
            ),
            "lengths must lie",
        ),
        (
            lambda: dj.sort_candidate_blocks(
                jnp.zeros((2, 4), jnp.float32),
                jnp.zeros(2, jnp.int32),
                jnp.zeros((2, 1), jnp.int32),
            ),
            "selected must have",
        ),
    ],
)
def test_block_ops_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------ the CUDA kernel: on the CPU stand-in, and on the GPU
@pytest.mark.parametrize(
    "impl",
    [
        "emulated",
        pytest.param("ffi", marks=pytest.mark.gpu),
    ],
)
@pytest.mark.parametrize(
    "c,pages,p",
    [(16, 4, 64), (2048, 2048, 64), (2048, 16384, 64), (3000, 20000, 64), (256, 300, 48)],
)
def test_sort_kernel_matches_reference(request, rng, impl, c, pages, p):
    """Any order, repeats, -1 and ids past the row; page tables with holes and page ids past
    int32's slots; 48-position pages
    (6 blocks a page: no shift); tables staged in shared memory or read from global memory."""
    rows, b = 8, 8
    cap = pages * p
    lens = rng.integers(0, cap + 1, rows).astype(np.int32)
    lens[:4] = [0, 1, min(c * b, cap), cap]
    nb = -(-lens // b)
    sel = np.full((rows, c), -1, np.int32)
    for r in range(rows):
        pick = rng.choice(max(int(nb[r]), 1), size=min(c, int(nb[r])), replace=False)
        sel[r, : len(pick)] = pick
    sel[5, : c // 2] = sel[5, c // 2 : 2 * (c // 2)]  # repeats
    sel[6, :3] = [-5, cap, 2**30]  # out of range
    bt = rng.integers(-1, 10_000, (rows, pages)).astype(np.int32)
    # Page ids whose slots pass int32 name no page (-1); the largest that fits does.
    largest = (2**31 - p) // p
    bt[3, :3] = [2**31 - 1, largest + 1, largest]
    args = (jnp.asarray(sel), jnp.asarray(lens), jnp.asarray(bt))
    want = dj.sort_candidate_blocks(*args, block_size=b, page_size=p, implementation="reference")
    if impl == "emulated":
        from selection import emulate_sort

        status, got = emulate_sort(request.getfixturevalue("simt_topk"), sel, lens, bt, b, p)
        assert status == 0
        got = dict(zip(("blocks", "count", "valid_lens", "physical"), got))
        got = dj.CandidateTable(**got, block_size=b)
    else:
        poison_device_memory()
        got = dj.sort_candidate_blocks(*args, block_size=b, page_size=p, implementation="ffi")
    assert not any((np.asarray(x) == POISON).any() for x in jax.tree.leaves(got))
    assert not any((np.asarray(x) == 0x7EADBEEF).any() for x in jax.tree.leaves(got))
    jax.tree.map(
        lambda g, w: np.testing.assert_array_equal(np.asarray(g), np.asarray(w)), got, want
    )


@pytest.mark.gpu
def test_ffi_sort_refuses_tables_it_cannot_stage():
    sel = jnp.zeros((2, 5000), jnp.int32)
    with pytest.raises(NotImplementedError, match="4096"):
        dj.sort_candidate_blocks(
            sel, jnp.ones((2,), jnp.int32), jnp.zeros((2, 4), jnp.int32), implementation="ffi"
        )
