"""Property-based: random published and hand-made candidate tables, random lengths (negative,
past the page table, uint32 and int64 too), next_n 1 and 2, through every consumer path (mask,
sparse, auto, auto taking the sparse path) and the step. Every call gives the contract's answer
(the loop oracle on the same fp32 logits, lengths clamped by a plain reading of the contract) or,
eagerly, a ValueError naming the argument; never another answer.

Shapes are fixed (3 requests of at most 48 positions, C·B = 24 candidate positions), so each
(next_n, length dtype) compiles once and the examples vary only values.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import oracle
from factories import paged_cache, query, small_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_indexer import oracle_publish

import dsv41_jax as dj

BATCH, PAGES, P = 3, 3, 16
CAP = PAGES * P  # positions a request's page table holds
M = dj.INT32_MAX
BIG = {"int32": [M], "uint32": [2**32 - 1, 2**31], "int64": [2**32 + 3, 2**40, -(2**33)]}


@functools.cache
def caches():
    """Two layers' caches (fixed: the examples draw page tables over their pages)."""
    rng = np.random.default_rng(30)
    c1, _ = paged_cache(rng, BATCH, PAGES, P, 64, spare_pages=2)
    c2, _ = paged_cache(rng, BATCH, PAGES, P, 64, spare_pages=2)
    return c1, c2


def consumers(q2, cache2, ctx, bt, table, cfg):
    """Every consumer path over `table` ("auto" runs what "mask" or "sparse" runs, as its
    plan says: tests/test_layer_plan.py)."""
    out = {p: dj.select(q2, cache2, ctx, bt, table, cfg, path=p) for p in ("mask", "sparse")}
    out["auto"] = dj.select(q2, cache2, ctx, bt, table, cfg)
    return out


def run(next_n, q, q2, cache, cache2, ctx, bt, hand):
    cfg = small_config(next_n=next_n)
    top, table = dj.publish(q, cache, ctx, bt, cfg)
    steps = {}
    for path in ("auto", "sparse"):
        ix = dj.make_two_level_indexer(cfg, source_layer=0, consumer_layers=(1,), path=path)
        steps[path] = ix.decode({0: q, 1: q2}, {0: cache, 1: cache2}, ctx, bt, physical=True)
    return {
        "top": top,
        "table": table,
        "published": consumers(q2, cache2, ctx, bt, table, cfg),
        "hand": consumers(q2, cache2, ctx, bt, hand, cfg),
        "steps": steps,
    }


JITTED = jax.jit(run, static_argnums=0)


def clamp(lengths) -> np.ndarray:
    """The contract, read plainly: a request's length clamps to [0, capacity]."""
    return np.array([min(max(int(x), 0), CAP) for x in lengths])


def rows_of(lens, next_n) -> np.ndarray:
    return np.array([max(int(n) - next_n + 1 + j, 0) for n in lens for j in range(next_n)])


@st.composite
def case(draw):
    next_n = draw(st.sampled_from([1, 2]))
    dtype = draw(st.sampled_from(["int32", "uint32", "int64"]))
    low = 0 if dtype == "uint32" else -5
    special = [0, 1, 2, CAP - 1, CAP, CAP + 1, *BIG[dtype]] + ([-1] if low else [])
    lens = draw(
        st.lists(
            st.one_of(st.sampled_from(special), st.integers(low, CAP + 3)),
            min_size=BATCH,
            max_size=BATCH,
        )
    )
    eager = dtype == "int32" and draw(st.integers(0, 4)) == 0
    return next_n, dtype, lens, eager, draw(st.integers(0, 2**31))


def hand_table(rng, cfg):
    """Random block ids of every kind: in the row, past it, negative, padding, repeated,
    unordered, wrapping int32 when multiplied into positions; junk count / valid / physical."""
    rows, c = BATCH * cfg.next_n, cfg.candidate_topk_blocks
    pool = np.array([-(2**31), -3, -1, 0, 1, 5, 11, 12, 13, 20, 2**30, M], np.int64)
    blocks = np.where(
        rng.random((rows, c)) < 0.6,
        rng.integers(0, CAP // 4, (rows, c)),
        rng.choice(pool, (rows, c)),
    ).astype(np.int32)
    return dj.CandidateTable(
        jnp.asarray(blocks),
        jnp.asarray(rng.integers(-2, 9, rows).astype(np.int32)),
        jnp.asarray(rng.integers(-2, 40, rows).astype(np.int32)),
        jnp.asarray(rng.integers(-2, 50, (rows, c)).astype(np.int32)),
        block_size=cfg.candidate_block_size,
    )


@settings(
    max_examples=24,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case())
def test_every_consumer_path_and_the_step_meet_the_contract(example):
    next_n, dtype, lens, eager, seed = example
    rng = np.random.default_rng(seed)
    cfg = small_config(next_n=next_n)
    cache, cache2 = caches()
    pages = rng.permutation(cache.num_pages)[: BATCH * PAGES].reshape(BATCH, PAGES)
    if rng.random() < 0.3:  # a page id outside the cache: its positions score NaN
        pages[rng.integers(BATCH), rng.integers(PAGES)] = rng.choice([-1, cache.num_pages + 5])
    bt = jnp.asarray(pages.astype(np.int32))
    q = query(rng, BATCH, next_n, cfg.num_heads, cfg.head_dim)
    q2 = query(rng, BATCH, next_n, cfg.num_heads, cfg.head_dim)
    hand = hand_table(rng, cfg)

    with jax.enable_x64(dtype == "int64"):
        ctx = jnp.asarray(np.array(lens, dtype))
        if eager:
            try:
                got = run(next_n, q, q2, cache, cache2, ctx, bt, hand)
            except ValueError as e:
                assert "context_lens must lie in [0, 48]" in str(e), e
                assert clamp(lens).tolist() != list(lens)  # only lengths out of range raise
                return
        else:
            got = JITTED(next_n, q, q2, cache, cache2, ctx, bt, hand)

    rows = rows_of(clamp(lens), next_n)
    row_bt = np.repeat(pages, next_n, axis=0)
    # Logits of every position (each row's own length is the oracle's to apply).
    full = jnp.full((BATCH,), CAP, jnp.int32)
    logits = np.asarray(dj.paged_mqa_logits(q, cache, full, bt))
    logits2 = np.asarray(dj.paged_mqa_logits(q2, cache2, full, bt))
    want_top, want_table = oracle_publish(logits, rows, row_bt, cfg)
    np.testing.assert_array_equal(np.asarray(got["top"]), want_top)
    for field, want in zip(("blocks", "count", "valid_lens", "physical"), want_table):
        np.testing.assert_array_equal(np.asarray(getattr(got["table"], field)), want, field)

    def inside(blocks):
        k, b = cfg.index_topk, cfg.candidate_block_size
        return oracle.topk_inside_blocks(logits2, rows, blocks, k, b)

    for kind, blocks in (("published", want_table[0]), ("hand", np.asarray(hand.blocks))):
        want = inside(blocks)
        for path, sel in got[kind].items():
            np.testing.assert_array_equal(np.asarray(sel), want, err_msg=f"{kind} {path}")
    want_sel = inside(want_table[0])
    for path, step in got["steps"].items():
        np.testing.assert_array_equal(np.asarray(step.selections[0]), want_top, f"step {path}")
        np.testing.assert_array_equal(np.asarray(step.selections[1]), want_sel, f"step {path}")
        for layer, want in ((0, want_top), (1, want_sel)):
            slots = [oracle.physical_row(want[r], row_bt[r], P) for r in range(len(want))]
            np.testing.assert_array_equal(np.asarray(step.physical[layer]), np.array(slots))
