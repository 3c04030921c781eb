"""Issue 30's edge cases, each named for the call that went wrong: every one gives the answer of
the same call with in-range values (the reference's) or a ValueError naming the argument."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import paged_cache, query, small_config

import dsv41_jax as dj

CFG = small_config()  # B 4, C 6 (24 candidate positions), page 16


def assert_tree_equal(got, want):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def decode_inputs(rng, batch, pages, next_n=1):
    cache, bt = paged_cache(rng, batch, pages, CFG.page_size, CFG.head_dim)
    return query(rng, batch, next_n, CFG.num_heads, CFG.head_dim), cache, bt


# ------------------------------------------------ case 2: traced lengths past the table's capacity
@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64"])
@pytest.mark.parametrize("next_n", [1, 2])
def test_traced_lengths_past_capacity_keep_the_newest_block(rng, dtype, next_n):
    """jit(publish) with lengths [30, 9999] over a page table of 64 positions publishes what
    eager publish does with [30, 64]: the newest block (15) pinned, count 6; the consumers and
    the step select as with the clamped lengths too."""
    cfg = small_config(next_n=next_n)
    q, cache, bt = decode_inputs(rng, 2, 4, next_n)
    q2 = query(rng, 2, next_n, cfg.num_heads, cfg.head_dim)
    clamped = jnp.array([30, 64], jnp.int32)
    big = 2**33 if dtype == "int64" else 9999

    def run(ctx):
        top, table = dj.publish(q, cache, ctx, bt, cfg)
        sel = {p: dj.select(q2, cache, ctx, bt, table, cfg, path=p) for p in ("mask", "sparse")}
        step = dj.make_two_level_indexer(cfg, source_layer=0, consumer_layers=(1,))
        res = step.decode({0: q, 1: q2}, {0: cache, 1: cache}, ctx, bt, physical=True)
        return top, table, sel, res

    want = run(clamped)
    with jax.enable_x64(dtype == "int64"):
        got = jax.jit(run)(jnp.array([30, big], dtype))
    assert 15 in np.asarray(want[1].blocks)[-1].tolist()  # the newest block of the long row
    assert_tree_equal(got, want)


def test_traced_prefill_ends_past_the_keys_are_clamped_first(rng):
    """jit(publish_prefill) with 30 keys, starts [-3, 0], ends [99, 30]: row 0 sees [0, 30), its
    valid_lens those of 30 positions (not of 99 - (-3) = 102); the consumers agree."""
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((30, 64)), jnp.float32))
    q, q2 = (query(rng, 2, 1, CFG.num_heads, CFG.head_dim) for _ in range(2))

    def run(s, e):
        top, table = dj.publish_prefill(q, keys, s, e, CFG)
        sel = dj.select_prefill(q2, keys, s, e, table, CFG)
        return top, table, sel, dj.select_plain_prefill(q2, keys, s, e, CFG)

    want = run(jnp.array([0, 0]), jnp.array([30, 30]))
    got = jax.jit(run)(jnp.array([-3, 0]), jnp.array([99, 30]))
    assert_tree_equal(got, want)
    # Ends before starts (traced): empty rows, as 0 <= starts <= ends <= T makes them.
    empty = jax.jit(run)(jnp.array([20, 40]), jnp.array([5, 50]))
    assert np.asarray(empty[1].valid_lens).tolist() == [0, 0]
    assert (np.asarray(empty[0]) == -1).all() and (np.asarray(empty[2]) == -1).all()
