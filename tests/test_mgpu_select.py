"""The Pallas select's SIMT program on the CPU emulator: the emulator's own checks fire (bounds,
unwritten shared memory, races, non-uniform branches), and mutants of the program are caught by
the selection tests' inputs (so those tests can fail). The program against the reference on
every edge runs in test_topk.py / test_candidate_blocks.py as `emulated-pallas`."""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from factories import scores as make_scores
from selection import candidate_mask

import dsv41_jax as dj
from dsv41_jax import _simt
from dsv41_jax.topk import mgpu_select, pallas_mgpu


# ------------------------------------------------------------------------ the emulator
def _emulator(words=8, buffers=None):
    return _simt.Emulator(2, 64, words, buffers or {"a": np.zeros(16, np.uint32)})


def test_emulator_reports_an_out_of_bounds_load():
    b = _emulator()
    with pytest.raises(_simt.EmulationError, match="out-of-bounds"):
        b.ldg("a", b.add(b.tid(), 1))  # threads 15..63 read past the 16 words


def test_emulator_reports_a_misaligned_vector_load():
    b = _emulator(buffers={"a": np.zeros(1024, np.uint32)})
    with pytest.raises(_simt.EmulationError, match="aligned"):
        b.ldg4("a", b.add(b.mul(b.tid(), 4), 1))


def test_emulator_reports_a_read_of_unwritten_shared_memory():
    b = _emulator()
    b.sts(0, 1, b.eq(b.tid(), 0))
    b.barrier()
    b.lds(0)
    with pytest.raises(_simt.EmulationError, match="unwritten"):
        b.lds(1)


def test_emulator_reports_races_and_allows_atomics():
    b = _emulator()
    b.sts(0, 5, b.eq(b.tid(), 3))
    with pytest.raises(_simt.EmulationError, match="race"):
        b.lds(0)  # other threads read it before a barrier
    b = _emulator()
    b.sts(b.tid(), 0, b.lt(b.tid(), 8))
    b.barrier()
    b.red_add(2, 1)  # every thread adds to one word: fine
    b.barrier()
    assert (b.lds(2) == 64).all()
    with pytest.raises(_simt.EmulationError, match="race"):
        b.sts(2, 0, b.eq(b.tid(), 1))  # a store after others read it, no barrier between


def test_emulator_reports_a_branch_that_differs_within_a_cta():
    b = _emulator()
    with pytest.raises(_simt.EmulationError, match="branch"):
        b.if_(b.lt(b.tid(), 5), lambda: [1], lambda: [2], 1)
    got = b.if_(b.eq(b.cta(), 1), lambda: [1], lambda: [2], 1)[0]
    assert got[0, 0] == 2 and got[1, 0] == 1  # uniform per CTA, different between CTAs


# ------------------------------------------------------------------------ mutants
def _inputs(rng):
    """Rows where a mutant of the select shows: ties at the k-th key, -0 / +0, NaN and -inf,
    the k-th key the lowest of its bin, lengths 0 / 1 / k / k + 1, a masked row."""
    n, k = 3000, 64
    s = make_scores(rng, 7, n, "ties")
    s[1] = make_scores(rng, 1, n, "special")[0]
    s[2] = np.where(rng.random(n) < 0.5, 0.0, -0.0)
    s[3, :] = -1.0
    s[3, rng.choice(n, 40, replace=False)] = 4.0
    s[3, rng.choice(np.flatnonzero(s[3] < 0), 24, replace=False)] = 2.0  # k-th: its bin's lowest
    s[4, :] = -np.inf
    s[4, rng.choice(n, 20, replace=False)] = 1.0  # fewer than k selectable
    lens = np.array([n, n - 1, 65, n, n, 1, 64], np.int32)
    return s.astype(np.float32), lens, k


def _differs(rng, masked: bool) -> bool:
    s, lens, k = _inputs(rng)
    cand = candidate_mask(rng, lens, 200, 8, messy=True) if masked else None
    want = dj.topk(
        jnp.asarray(s),
        jnp.asarray(lens),
        k,
        candidates=None if cand is None else jnp.asarray(cand),
        implementation="reference",
    )
    try:
        got = pallas_mgpu.topk(s, lens, k, None, cand, 8, emulate=True)
    except _simt.EmulationError:
        return True
    return not np.array_equal(np.asarray(got), np.asarray(want))


def _skip_barrier(nth):
    barrier, count = _simt.Emulator.barrier, itertools.count()

    def mutant(self):
        if next(count) != nth:
            barrier(self)

    return mutant


MUTANTS = {
    "bin's lowest key not taken": (mgpu_select, "_below", lambda b, lo: lo),
    "-0 not tied with +0": (
        mgpu_select,
        "_to_key",
        lambda b, x: b.xor(x, b.sel(b.ge(x, 1 << 31), 0xFFFFFFFF, 1 << 31)),
    ),
    "-inf selectable": (
        mgpu_select,
        "_unscored",
        lambda b, x: b.gt(b.and_(x, 0x7FFFFFFF), 0x7F800000),
    ),
    "warp scan one step short": (mgpu_select, "_warp_scan", lambda b, x, lane: x),
    "second barrier dropped": (_simt.Emulator, "barrier", _skip_barrier(1)),
    "fourth barrier dropped": (_simt.Emulator, "barrier", _skip_barrier(3)),
    "atomic adds lost": (_simt.Emulator, "red_add", lambda self, off, val, p=None: None),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_select_program_mutants_are_caught(monkeypatch, rng, mutant):
    target, name, value = MUTANTS[mutant]
    monkeypatch.setattr(target, name, value)
    assert _differs(rng, masked=False) or _differs(rng, masked=True), mutant


def test_select_program_unmutated_passes_the_mutant_inputs(rng):
    assert not _differs(rng, masked=False) and not _differs(rng, masked=True)


# ------------------------------------------------------------------------ launches
@pytest.mark.parametrize(
    "width,k,threads,plan",
    [
        (16384, 512, 1024, [1]),
        (16385, 512, 1024, [2, 1]),
        (131072, 512, 512, [16, 1]),
        (131072, 2048, 1024, [8, 1]),
        (1 << 20, 512, 1024, [64, 2, 1]),
    ],
)
def test_launch_plan(width, k, threads, plan):
    """Rows over a chunk: the first launch's chunks, then their candidates, down to one CTA."""
    assert mgpu_select.stages(width, k, threads) == plan


def test_first_launch_threads_policy():
    assert mgpu_select.first_threads(8, 131072, 512, 132) == 512  # one wave, one merge
    assert mgpu_select.first_threads(8, 131072, 2048, 132) == 1024  # merge over a chunk
    assert mgpu_select.first_threads(64, 131072, 512, 132) == 1024  # several waves
    assert mgpu_select.first_threads(8, 16384, 512, 132) == 1024  # one chunk
    assert mgpu_select.first_threads(8, 131072, 512, 0) == 1024  # SM count unknown


def test_gathered_rows_read_only_their_blocks(rng):
    """A gathered masked row: the CTA loads only its candidate blocks, so scores outside them
    may be anything (here NaN-poisoned) and the answer is the reference's."""
    n, k, c = 70000, 128, 300
    s = make_scores(rng, 3, n, "random")
    lens = np.array([n, 50001, 9], np.int32)
    cand = candidate_mask(rng, lens, c, 8, messy=True)
    member = np.zeros((3, -(-n // 8)), bool)
    for r in range(3):
        ids = cand[r][(cand[r] >= 0) & (cand[r] < member.shape[1])]
        member[r, ids] = True
    poisoned = np.where(np.repeat(member, 8, axis=1)[:, :n], s, np.nan).astype(np.float32)
    got = pallas_mgpu.topk(poisoned, lens, k, None, cand, 8, emulate=True)
    want = dj.topk(
        jnp.asarray(s),
        jnp.asarray(lens),
        k,
        candidates=jnp.asarray(cand),
        implementation="reference",
    )
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert mgpu_select.gathers(n, c, 8)


def test_bf16_masks_of_blocks_not_a_multiple_of_8_are_declined():
    """A bf16 word holds two scores, so a gathered load must stay inside a block: blocks of 4
    are declined (logged, the next implementation runs), and the dispatch does not prefer it."""
    s = np.zeros((2, 4096), jnp.bfloat16)
    lens, cand = np.full(2, 4096, np.int32), np.zeros((2, 16), np.int32)
    with pytest.raises(NotImplementedError, match="multiple of 8"):
        pallas_mgpu.topk(s, lens, 8, None, cand, 4, emulate=True)
    assert dj.plan("topk", s, 8, candidates=cand, block_size=4).order[0] == "ffi"
    assert dj.plan("topk", s, 8, candidates=cand, block_size=8).order[0] == "pallas"
