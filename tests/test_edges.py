"""Issue 30's and issue 70's edge cases, each named for the call that went wrong: every one gives
the answer of the same call with in-range values (the reference's) or a ValueError naming the
argument."""

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


# ------------------------------------------------ case 4: hand-made tables on the sparse path
M = dj.INT32_MAX


def hand_made(blocks, dtype=np.int32):
    """A CandidateTable of these blocks with meaningless count, valid_lens and physical (what a
    user may build or edit): only `blocks` may matter to any consumer."""
    blocks = np.asarray(blocks, dtype)
    rows, c = blocks.shape
    return dj.CandidateTable(
        jnp.asarray(blocks),
        jnp.full((rows,), 2, jnp.int32),
        jnp.full((rows,), 7, jnp.int32),
        jnp.full((rows, c), 3, jnp.int32),
        block_size=CFG.candidate_block_size,
    )


def topk_inside(logits, rows, blocks):
    """The contract: top-k over the row's visible positions whose block is in the table."""
    import oracle

    return oracle.topk_inside_blocks(logits, rows, blocks, CFG.index_topk, CFG.candidate_block_size)


HAND_MADE = [
    [1, 1, 3, 3, 2, M],  # repeated blocks, unsorted
    [-1, 20, 0, M, M, M],  # a negative block and one past the row
    [M, M, M, M, M, M],  # nothing
    [7, 5, 2**30, 6, -(2**31), 4],  # unsorted, an id whose position would wrap int32
]


@pytest.mark.parametrize("jit", [False, True])
def test_hand_made_tables_give_every_path_the_mask_answer(rng, jit):
    """Repeated, unordered, negative and out-of-row blocks, with junk count / valid_lens /
    physical: mask, sparse and auto all return the contract's answer (was: repeated and
    negative positions on the sparse path)."""
    q, cache, bt = decode_inputs(rng, 4, 4)
    ctx = jnp.array([30, 50, 20, 64])
    table = hand_made(HAND_MADE)
    logits = np.asarray(dj.paged_mqa_logits(q, cache, ctx, bt))
    want = topk_inside(logits, np.asarray(ctx), np.asarray(table.blocks))
    assert (want[0] >= 0).sum() == CFG.index_topk and want[2].max() == -1

    def run(t):
        return {p: dj.select(q, cache, ctx, bt, t, CFG, path=p) for p in ("mask", "sparse", "auto")}

    got = (jax.jit(run) if jit else run)(table)
    for path, sel in got.items():
        np.testing.assert_array_equal(np.asarray(sel), want, err_msg=path)


def test_int64_and_uint32_table_blocks_saturate_rather_than_wrap(rng):
    """Block 2**32 + 1 is no block 1 (under x64 an int64 table reaches the consumers as is)."""
    q, cache, bt = decode_inputs(rng, 2, 4)
    ctx = jnp.array([30, 64])
    logits = np.asarray(dj.paged_mqa_logits(q, cache, ctx, bt))
    with jax.enable_x64(True):
        table = hand_made([[2**32 + 1, 3, M, M, M, M], [2**33 + 15, 2, 0, M, M, M]], np.int64)
        got = {p: dj.select(q, cache, ctx, bt, table, CFG, path=p) for p in ("mask", "sparse")}
    want = topk_inside(logits, [30, 64], [[3], [2, 0]])
    for path, sel in got.items():
        np.testing.assert_array_equal(np.asarray(sel), want, err_msg=path)
    unsigned = hand_made([[2**32 - 1, 3, M, M, M, M], [1, 2, 0, M, M, M]], np.uint32)
    np.testing.assert_array_equal(
        np.asarray(dj.select(q, cache, ctx, bt, unsigned, CFG, path="sparse")),
        topk_inside(logits, [30, 64], [[3], [1, 2, 0]]),
    )


def test_a_float_table_is_refused_naming_the_field(rng):
    q, cache, bt = decode_inputs(rng, 2, 4)
    ctx = jnp.array([30, 50])
    t = hand_made(HAND_MADE[:2])
    bad = dj.CandidateTable(
        t.blocks.astype(jnp.float32), t.count, t.valid_lens, t.physical, block_size=4
    )
    for path in ("mask", "sparse", "auto"):
        with pytest.raises(ValueError, match="table.blocks must have an integer dtype"):
            dj.select(q, cache, ctx, bt, bad, CFG, path=path)
    short = dj.CandidateTable(t.blocks, t.count[:1], t.valid_lens, t.physical, block_size=4)
    with pytest.raises(ValueError, match=r"table.count must have shape \(2,\)"):
        dj.select(q, cache, ctx, bt, short, CFG, path="sparse")
    with pytest.raises(ValueError, match="candidates.blocks must have an integer dtype"):
        dj.topk(jnp.zeros((2, 64)), ctx, 3, candidates=bad, block_size=4)


def test_sparse_columns_of_a_negative_block_map_to_minus_one():
    t = hand_made([[-1, 2, M, M, M, M]])
    got = dj.sparse_columns_to_positions(jnp.array([[0, 3, 4, 9, -1]]), t, 4)
    assert np.asarray(got).tolist() == [[-1, -1, 8, -1, -1]]


# ------------------------------------------------ issue 70: positions and slots never wrap
def test_sparse_columns_of_a_block_past_int32_map_to_minus_one():
    """Block 2**30 of 4 would be position 2**32 (wrapped: 0), block 2**29 + 1 position
    -2147483644: both name no position; so does a column past C·B. The last block whose
    positions fit int32 keeps them."""
    last = (2**31 - 4) // 4
    t = hand_made([[2**30, 2**29 + 1, 3, last, M, M]])
    got = dj.sparse_columns_to_positions(jnp.array([[0, 1, 4, 8, 12, 15, 24, 99]]), t, 4)
    assert np.asarray(got).tolist() == [[-1, -1, -1, 12, 4 * last, 2**31 - 1, -1, -1]]
    with jax.enable_x64(True):  # an int64 table: 2**32 + 1 is no block 1
        t64 = hand_made([[2**32 + 1, 1, M, M, M, M]], np.int64)
        got = dj.sparse_columns_to_positions(jnp.array([[0, 4]]), t64, 4)
    assert np.asarray(got).tolist() == [[-1, 4]]


def test_sparse_reference_logits_score_no_wrapped_position(rng):
    """A hand-made table's block 2**30 (positions 2**32 + j, wrapped: j, inside the row) scores
    -inf as padding does, not the logits of positions 0-3."""
    q, cache, bt = decode_inputs(rng, 1, 4)
    ctx = jnp.array([30])
    dense = np.asarray(dj.paged_mqa_logits(q, cache, ctx, bt))
    table = dj.CandidateTable(
        jnp.array([[2**30, 1, 2**29 + 1, M, M, M]], jnp.int32),
        jnp.array([3], jnp.int32),
        jnp.array([12], jnp.int32),
        jnp.full((1, 6), 3, jnp.int32),
        block_size=4,
    )
    got = np.asarray(dj.sparse_paged_mqa_logits(q, cache, table, ctx, bt, block_size=4))
    assert np.isneginf(got[0, :4]).all() and np.isneginf(got[0, 8:]).all()
    np.testing.assert_array_equal(got[0, 4:8], dense[0, 4:8])


def test_published_slots_of_a_page_past_int32_are_minus_one():
    """`physical` of a block on page 2**30 (slot 2**30·16/4 = 2**32: wrapped, 0) is -1, as
    `logical_to_physical` maps that page's positions; the last addressable page keeps its
    slots."""
    last = (2**31 - 16) // 16
    bt = jnp.array([[2**30, last, 0, -1]], jnp.int32)
    got = dj.sort_candidate_blocks(
        jnp.array([[0, 5, 4]]), jnp.array([40]), bt, block_size=4, page_size=16
    )
    assert np.asarray(got.blocks).tolist() == [[0, 4, 5]]
    assert np.asarray(got.physical).tolist() == [[-1, 4 * last, 4 * last + 1]]
    slots = dj.logical_to_physical(jnp.array([[0, 16]]), bt, 16)
    assert np.asarray(slots).tolist() == [[-1, 16 * last]]


# ------------------------------------------------ case 5: float64 lists, ids past int32
def test_float64_scores_as_a_python_list_are_refused_like_a_float64_array():
    s = [[1.0, 1.0 + 1e-12, 0.5]]  # Python floats: float64; as float32 the first two would tie
    for call in (
        lambda: dj.topk(s, [3], 1),
        lambda: dj.block_amax(s, [3], block_size=1),
        lambda: dj.select_candidate_blocks(s, [3], num_candidates=1, block_size=1),
    ):
        with pytest.raises(ValueError, match="scores must be float32, bfloat16 or float16"):
            call()
    assert dj.topk(np.float32(s), [3], 1).tolist() == [[0]]  # an explicit cast is accepted


def test_selection_overlap_compares_ids_past_int32_as_themselves():
    with jax.enable_x64(True):
        a = jnp.array([[2**31, 5, -1]], jnp.int64)
        r = jnp.array([[2**31 + 1, 5, 2**40]], jnp.int64)
        jaccard, recall = dj.selection_overlap(a, r)
        assert float(jaccard[0]) == 0.25 and abs(float(recall[0]) - 1 / 3) < 1e-6
        same, _ = dj.selection_overlap(a, jnp.array([[5, 2**31, -7]], jnp.int64))
        assert float(same[0]) == 1.0
    big = jnp.array([[2**32 - 1, 2**31, 3]], jnp.uint32)  # uint32 ids past int32, x64 off
    jaccard, recall = dj.selection_overlap(big, jnp.array([[2**31 - 1, 3, -1]], jnp.int32))
    assert float(jaccard[0]) == 1 / 4 and float(recall[0]) == 1 / 2


def test_row_sharded_select_checks_the_table_before_splitting_it(rng):
    from jax.sharding import Mesh

    from dsv41_jax import sharding

    q, cache, bt = decode_inputs(rng, 2, 4)
    t = hand_made(HAND_MADE[:2])
    bad = dj.CandidateTable(t.blocks, t.count[:1], t.valid_lens, t.physical, block_size=4)
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    with pytest.raises(ValueError, match=r"table.count must have shape \(2,\)"):
        sharding.select_row_sharded(q, cache, jnp.array([3, 4]), bt, bad, CFG, mesh=mesh, axis="x")
    got = sharding.select_row_sharded(
        q, cache, jnp.array([30, 50]), bt, t, CFG, mesh=mesh, axis="x", path="sparse"
    )
    want = dj.select(q, cache, jnp.array([30, 50]), bt, t, CFG, path="mask")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# ------------------------------------------------ issue 70: constructors check as factories do
@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(source_layer=20, consumer_layers=(24, 20)), "a layer appears twice"),  # was taken
        (dict(source_layer=None, consumer_layers=(24,)), "consumer_layers need a source_layer"),
        (dict(source_layer=None, consumer_layers=()), "needs a source_layer or plain_layers"),
        (dict(source_layer=20, consumer_layers=24), "consumer_layers must be a sequence"),
        (dict(source_layer="20", consumer_layers=()), "source_layer must be an int"),
        (dict(source_layer=20, consumer_layers=(24,), path="dense"), "path must be 'auto'"),
        (dict(source_layer=20, consumer_layers=(), fuse="no"), "fuse must be a bool"),
        (dict(source_layer=20, consumer_layers=(), topk_algorithm="radix"), "topk_algorithm"),
        (dict(source_layer=20, consumer_layers=(), implementation="cuda"), "unknown implem"),
    ],
)
def test_two_level_indexer_constructor_checks_as_the_factory_does(kwargs, message):
    """`TwoLevelIndexer(...)` refuses what `make_two_level_indexer` refuses (a layer taken twice
    made decode_stacked return layer 20 twice; consumers without a source met a bare assert)."""
    with pytest.raises(ValueError, match=message):
        dj.TwoLevelIndexer(CFG, **kwargs)
    if "needs a source" not in message:  # the factory returns None for no layers at all
        with pytest.raises(ValueError, match=message):
            dj.make_two_level_indexer(CFG, **kwargs)
    with pytest.raises(ValueError, match="config must be an IndexerConfig"):
        dj.TwoLevelIndexer(None, 20, ())


def test_two_level_indexer_constructor_stores_what_the_factory_stores():
    """Layer ids from a list or a NumPy array (was: the truth value of an array is ambiguous),
    a single implementation name: the same, hashable step as the factory's."""
    built = dj.TwoLevelIndexer(CFG, np.int64(20), [24, 28], np.array([3]), implementation="pallas")
    made = dj.make_two_level_indexer(
        CFG,
        source_layer=20,
        consumer_layers=np.array([24, 28]),
        plain_layers=[3],
        implementation="pallas",
    )
    assert built == made and hash(built) == hash(made)
    assert (built.source_layer, built.consumer_layers, built.plain_layers) == (20, (24, 28), (3,))
    assert built.implementation == ("pallas",) and type(built.source_layer) is int
    assert dj.make_two_level_indexer(CFG, source_layer=None, plain_layers=np.array([], int)) is None
