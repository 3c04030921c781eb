"""select_candidate_blocks: the reference against the loop oracle, then every implementation
(the Pallas select's program on the CPU emulator, the CUDA source on the CPU stand-in, and on the
GPU the FFI kernels and Pallas) against the reference, exactly."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from factories import scores as make_scores
from selection import Case, impl_params, params, run_candidate_blocks

import dsv41_jax as dj


def candidates_expected(bs, lens, c, b):
    return np.array([oracle.candidate_row(bs[r], int(lens[r]), c, b) for r in range(len(lens))])


@pytest.mark.parametrize("kind", ["random", "ties", "special", "equal", "denormal"])
@pytest.mark.parametrize("c", [1, 4, 16])
def test_select_candidate_blocks(rng, kind, c):
    b = 8
    # nblocks around C: fewer, exactly C, C + 1, many; and C·B, C·B + 1 positions.
    lens = np.array([0, 1, 7, 8, 9, c * b - 1, c * b, c * b + 1, 40 * b, 37 * b + 3], np.int32)
    nb = 40
    bs = make_scores(rng, len(lens), nb, kind)
    got = dj.select_candidate_blocks(
        jnp.asarray(bs), jnp.asarray(lens), num_candidates=c, block_size=b
    )
    np.testing.assert_array_equal(np.asarray(got), candidates_expected(bs, lens, c, b))


def test_select_candidate_blocks_pins_newest_over_infinite_scores():
    bs = np.full((1, 6), np.inf, np.float32)
    bs[0, 5] = -np.inf
    got = dj.select_candidate_blocks(
        jnp.asarray(bs), jnp.array([48], jnp.int32), num_candidates=3, block_size=8
    )
    np.testing.assert_array_equal(np.asarray(got), [[0, 1, 5]])


def test_select_candidate_blocks_orders_denormal_block_scores():
    """Block scores that are denormals, +-0.0 and negatives rank by IEEE value (XLA's CPU
    backend flushes denormals to zero in float compares); the newest block stays pinned."""
    d1, d3, dmax = np.array([1, 3, 0x7FFFFF], np.uint32).view(np.float32)
    bs = np.array([[d1, -0.0, d3, -d1, 0.0, dmax, np.nan, -d3, 0.0, -5.0]], np.float32)
    lens = jnp.array([9 * 8 - 3], jnp.int32)  # 9 blocks: block 8 is the newest, block 9 unseen
    # Blocks 0-7 by hand: dmax, d3, d1, the zeros (1, 4), -d1, -d3, NaN last.
    ranked = [5, 2, 0, 1, 4, 3, 7, 6]
    for c in (1, 2, 3, 4, 5, 6, 8, 9, 10):
        want = sorted([8] + ranked[: c - 1]) + [-1] * (c - 9)
        got = dj.select_candidate_blocks(jnp.asarray(bs), lens, num_candidates=c, block_size=8)
        np.testing.assert_array_equal(np.asarray(got)[0], want, err_msg=f"C={c}")
        np.testing.assert_array_equal(want, oracle.candidate_row(bs[0], int(lens[0]), c, 8))


# ------------------------------------------------------------ every implementation, exactly
KINDS = ("random", "ties", "special", "equal")
# (rows, blocks, C): a case's `n` is its block count and `k` its C.
SIZES = ((7, 300, 16), (3, 512, 16), (9, 16384, 2048), (8, 16384, 2048), (64, 131072, 2048))
CASES = [Case(r, nb, c, kind) for r, nb, c in SIZES for kind in KINDS]
CASES.append(Case(7, 300, 16, "denormal"))


def lengths(rng, rows, nb, c, b=8):
    """Row lengths in positions: nblocks below, at and above C; the whole row; then random."""
    edges = [0, 1, 8, 9, c * b - 1, c * b, c * b + 1, nb * b]
    lens = edges[:rows] + list(rng.integers(0, nb * b + 1, max(rows - len(edges), 0)))
    return np.minimum(np.array(lens, np.int64), nb * b).astype(np.int32)


@pytest.mark.parametrize("impl,case", params(CASES))
def test_candidate_blocks_equal_reference(request, rng, impl, case):
    bs = make_scores(rng, case.rows, case.n, case.kind)
    lens = lengths(rng, case.rows, case.n, case.k)
    got = run_candidate_blocks(impl, request, bs, lens, case.k)
    want = dj.select_candidate_blocks(
        jnp.asarray(bs), jnp.asarray(lens), num_candidates=case.k, implementation="reference"
    )
    np.testing.assert_array_equal(got, np.asarray(want), err_msg=impl.name)


@pytest.mark.parametrize("impl", impl_params(Case(4, 300, 16)))
def test_candidate_blocks_unscored_blocks_fill_the_table(request, rng, impl):
    """Rows with fewer scored (finite or +inf) blocks than C: NaN and -inf blocks rank last but
    still fill the table, by block id, so exactly C blocks are chosen."""
    nb, c = 300, 16
    bs = np.where(rng.random((4, nb)) < 0.5, np.nan, -np.inf).astype(np.float32)
    bs[1, [7, 100, 250]] = [1.0, np.inf, -2.0]
    bs[2, rng.choice(nb, 15, replace=False)] = rng.standard_normal(15)
    bs[3, :] = np.nan
    lens = np.array([nb * 8, nb * 8 - 5, nb * 8, 200 * 8 + 1], np.int32)
    got = run_candidate_blocks(impl, request, bs, lens, c)
    want = dj.select_candidate_blocks(
        jnp.asarray(bs), jnp.asarray(lens), num_candidates=c, implementation="reference"
    )
    np.testing.assert_array_equal(got, np.asarray(want), err_msg=impl.name)
