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


# ------------------------------------------------ case 6: clear errors at the newest entry points
def test_stacked_query_bundle_or_key_buffer_gets_a_clear_error(rng):
    q, cache, bt = decode_inputs(rng, 2, 4)
    stacked = jax.tree.map(lambda *x: jnp.stack(x), q, q)
    ctx = jnp.array([3, 4])
    for call in (
        lambda: dj.publish(stacked, cache, ctx, bt, CFG),
        lambda: dj.paged_mqa_logits(stacked, cache, ctx, bt),
    ):
        with pytest.raises(ValueError, match=r"query has leading dimensions \(2,\) .*stacked"):
            call()
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((30, 64)), jnp.float32))
    keys2 = jax.tree.map(lambda *x: jnp.stack(x), keys, keys)
    with pytest.raises(ValueError, match=r"keys has leading dimensions \(2,\) .*stacked"):
        dj.publish_prefill(q, keys2, jnp.array([0, 0]), jnp.array([3, 4]), CFG)


def test_pcp_and_dcp_outside_shard_map_name_the_axis(rng):
    from dsv41_jax import sharding

    q, cache, bt = decode_inputs(rng, 2, 4)
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((30, 64)), jnp.float32))
    s, e, ctx = jnp.array([0, 0]), jnp.array([3, 4]), jnp.array([3, 4])
    _, table = dj.publish(q, cache, ctx, bt, CFG)
    calls = {
        "dcp_publish": lambda: sharding.dcp_publish(q, cache, bt, ctx, CFG, axis="x"),
        "dcp_select": lambda: sharding.dcp_select(q, cache, bt, ctx, table, CFG, axis="x"),
        "pcp_keys": lambda: sharding.pcp_keys(keys, axis="x"),
        "pcp_publish_prefill": lambda: sharding.pcp_publish_prefill(q, keys, s, e, CFG, axis="x"),
        "pcp_select_prefill": lambda: sharding.pcp_select_prefill(
            q, keys, s, e, table, CFG, axis="x"
        ),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"{name} must be called inside jax.shard_map .*'x'"):
            call()
    with pytest.raises(ValueError, match="table must be a CandidateTable"):
        sharding.dcp_select(q, cache, bt, ctx, None, CFG, axis="x")


def test_prefill_with_no_query_rows_or_no_keys(rng):
    """0 query rows: empty outputs (was ZeroDivisionError in a reshape); 0 keys: every row empty
    (was an error about a block table, which prefill does not have)."""
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((30, 64)), jnp.float32))
    q0 = query(rng, 0, 1, CFG.num_heads, CFG.head_dim)
    none = jnp.zeros(0, jnp.int32)
    top, table = dj.publish_prefill(q0, keys, none, none, CFG)
    assert top.shape == (0, CFG.index_topk) and table.blocks.shape == (0, 6)
    assert dj.select_prefill(q0, keys, none, none, table, CFG).shape == (0, CFG.index_topk)
    no_keys = dj.quantize_keys(jnp.zeros((0, 64), jnp.float32))
    q = query(rng, 2, 1, CFG.num_heads, CFG.head_dim)
    zero = jnp.zeros(2, jnp.int32)
    top, table = dj.publish_prefill(q, no_keys, zero, zero, CFG)
    assert (np.asarray(top) == -1).all() and np.asarray(table.count).tolist() == [0, 0]
    assert (np.asarray(dj.select_prefill(q, no_keys, zero, zero, table, CFG)) == -1).all()
