"""The step API: built from the model's layer roles, equal to publish/select composed by hand,
stateless (publish without select, an exception in between, reuse), jit- and donation-friendly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import paged_cache, query, small_config

import dsv41_jax as dj

CFG = small_config()


def layer_inputs(rng, indexer, lens, pages=10):
    queries, caches = {}, {}
    bt = None
    for layer in indexer.layers:
        caches[layer], table = paged_cache(rng, len(lens), pages, CFG.page_size, CFG.head_dim)
        bt = table if bt is None else bt
        queries[layer] = query(rng, len(lens), 1, CFG.num_heads, CFG.head_dim)
    return queries, caches, jnp.asarray(np.array(lens, np.int32)), bt


def v41_like(**kw):
    return dj.make_two_level_indexer(CFG, source_layer=20, consumer_layers=(24, 28, 32, 36), **kw)


def test_factory_roles_and_none_without_source():
    ix = v41_like(plain_layers=[3])
    assert ix.layers == (3, 20, 24, 28, 32, 36)
    assert jax.tree.leaves(ix) == []  # all static
    assert dj.make_two_level_indexer(CFG, source_layer=None) is None
    with pytest.raises(ValueError, match="need a source_layer"):
        dj.make_two_level_indexer(CFG, source_layer=None, consumer_layers=(24,))
    with pytest.raises(ValueError, match="twice"):
        dj.make_two_level_indexer(CFG, source_layer=20, consumer_layers=(20,))
    with pytest.raises(ValueError, match="path"):
        v41_like(path="dense")
    with pytest.raises(ValueError, match="implementation"):
        v41_like(implementation="cuda")
    with pytest.raises(ValueError, match="consumer_layers"):
        dj.make_two_level_indexer(CFG, source_layer=20, consumer_layers=("24",))
    if jax.default_backend() != "gpu":
        with pytest.raises(dj.ExtensionUnavailable):
            v41_like(implementation="ffi")


def test_plain_layers_only_model(rng):
    """A model without a candidate source (V3.2-style: every indexer layer selects on its own)
    keeps its plain layers: decode and prefill return their selections and no table."""
    ix = dj.make_two_level_indexer(CFG, source_layer=None, plain_layers=(1, 2, 3))
    assert ix is not None and ix.layers == (1, 2, 3) and ix.source_layer is None
    lens = [0, 5, 150]
    queries, caches, ctx, bt = layer_inputs(rng, ix, lens)
    got = jax.jit(lambda *a: ix.decode(*a, physical=True))(queries, caches, ctx, bt)
    assert got.table is None and sorted(got.selections) == [1, 2, 3]
    for layer in (1, 2, 3):
        want = dj.select_plain(queries[layer], caches[layer], ctx, bt, CFG)
        np.testing.assert_array_equal(np.asarray(got.selections[layer]), np.asarray(want))
    assert sorted(got.physical) == [1, 2, 3]


def test_decode_equals_hand_composition(rng):
    ix = v41_like(plain_layers=(3,))
    lens = [0, 1, 9, 24, 25, 150, 160]
    queries, caches, ctx, bt = layer_inputs(rng, ix, lens)
    got = jax.jit(lambda *a: ix.decode(*a, physical=True))(queries, caches, ctx, bt)
    top, table = dj.publish(queries[20], caches[20], ctx, bt, CFG)
    np.testing.assert_array_equal(np.asarray(got.selections[20]), np.asarray(top))
    jax.tree.map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), got.table, table
    )
    for layer in (24, 28, 32, 36):
        want = dj.select(queries[layer], caches[layer], ctx, bt, table, CFG)
        np.testing.assert_array_equal(np.asarray(got.selections[layer]), np.asarray(want))
    dense = dj.topk(dj.paged_mqa_logits(queries[3], caches[3], ctx, bt), ctx, CFG.index_topk)
    np.testing.assert_array_equal(np.asarray(got.selections[3]), np.asarray(dense))
    for layer, sel in got.selections.items():
        slots = dj.logical_to_physical(sel, bt, CFG.page_size)
        np.testing.assert_array_equal(np.asarray(got.physical[layer]), np.asarray(slots))


def test_stateless_publish_only_exception_and_reuse(rng):
    ix = v41_like()
    queries, caches, ctx, bt = layer_inputs(rng, ix, [5, 40, 160])
    first = ix.decode(queries, caches, ctx, bt)
    # A model whose source layer publishes but no layer consumes.
    alone = dj.make_two_level_indexer(CFG, source_layer=20)
    only = alone.decode({20: queries[20]}, {20: caches[20]}, ctx, bt)
    np.testing.assert_array_equal(np.asarray(only.selections[20]), np.asarray(first.selections[20]))
    # An exception between publish and the consumers leaves nothing behind.
    with pytest.raises(ValueError, match="no entry for indexer layers"):
        ix.decode({20: queries[20]}, caches, ctx, bt)
    again = ix.decode(queries, caches, ctx, bt)
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_decode_under_jit_with_donated_caches(rng):
    ix = v41_like()
    queries, caches, ctx, bt = layer_inputs(rng, ix, [30, 160])
    want = ix.decode(queries, caches, ctx, bt)
    step = jax.jit(lambda q, c, n, b: (ix.decode(q, c, n, b), c), donate_argnums=1)
    copies = jax.tree.map(jnp.copy, caches)
    got, _ = step(queries, copies, ctx, bt)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_prefill_equals_hand_composition(rng):
    ix = dj.make_two_level_indexer(CFG, source_layer=20, consumer_layers=(24,), plain_layers=(3,))
    tokens = 60
    starts, ends = jnp.array([0, 0, 10, 30]), jnp.array([0, 25, 40, 60])
    queries, keys = {}, {}
    for layer in ix.layers:
        keys[layer] = dj.quantize_keys(
            jnp.asarray(rng.standard_normal((tokens, CFG.head_dim)), jnp.float32)
        )
        queries[layer] = query(rng, 4, 1, CFG.num_heads, CFG.head_dim)
    got = ix.prefill(queries, keys, starts, ends)
    chunked = jax.jit(lambda *a: ix.prefill(*a, row_chunk=3))(queries, keys, starts, ends)
    for a, b in zip(jax.tree.leaves(chunked), jax.tree.leaves(got)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    top, table = dj.publish_prefill(queries[20], keys[20], starts, ends, CFG)
    np.testing.assert_array_equal(np.asarray(got.selections[20]), np.asarray(top))
    want = dj.select_prefill(queries[24], keys[24], starts, ends, table, CFG)
    np.testing.assert_array_equal(np.asarray(got.selections[24]), np.asarray(want))
    assert got.physical is None


def test_per_op_implementation_names_are_skipped_where_missing(rng):
    """publish(implementation="pallas") used to raise (the logits have no Pallas version); a
    name an op lacks now leaves that op on its own order."""
    ix = v41_like(implementation=("pallas", "reference"))
    queries, caches, ctx, bt = layer_inputs(rng, ix, [30, 160])
    got = ix.decode(queries, caches, ctx, bt)
    want = v41_like().decode(queries, caches, ctx, bt)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    top, _ = dj.publish(queries[20], caches[20], ctx, bt, CFG, implementation="reference")
    np.testing.assert_array_equal(np.asarray(top), np.asarray(want.selections[20]))


@pytest.mark.parametrize("plain_only", [False, True])
def test_decode_stacked_is_decode_selections_stacked_in_layer_order(rng, plain_only):
    ix = (
        dj.make_two_level_indexer(CFG, source_layer=None, plain_layers=(9, 2))
        if plain_only
        else v41_like(plain_layers=[3])
    )
    assert ix is not None
    queries, caches, ctx, bt = layer_inputs(rng, ix, [0, 1, 9, 150, 160])
    got = jax.jit(ix.decode_stacked)(queries, caches, ctx, bt)
    want = ix.decode(queries, caches, ctx, bt).selections
    assert got.shape == (len(ix.layers), 5, CFG.index_topk) and got.dtype == jnp.int32
    np.testing.assert_array_equal(got, np.stack([want[layer] for layer in ix.layers]))
    with pytest.raises(ValueError, match="no entry for indexer layers"):
        ix.decode_stacked({}, caches, ctx, bt)
