"""Property-based: random shapes, lengths, dtypes and bad values through the public API. Every
call either meets the contract (against the plain-loop oracle) or raises a ValueError that names
an argument; no other exception escapes."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import oracle
import pytest
from factories import small_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dsv41_jax as dj

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
ARGS = (
    r"scores|lengths|starts|k|block_size|candidates|num_candidates|block_scores|selected|"
    r"block_table|page_size|indices|pin_newest|implementation"
)
# An argument named as a whole word (so "k" is not found inside "block" or "keys").
NAMES_AN_ARGUMENT = re.compile(rf"(?<![\w.])({ARGS})(?![\w])")


def valid_or_named_error(call, expected=None):
    """Run `call`; return its result, or None after checking a ValueError names an argument."""
    try:
        out = call()
    except ValueError as e:
        assert NAMES_AN_ARGUMENT.search(str(e)), f"ValueError does not name an argument: {e}"
        return None
    if expected is not None:
        np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))
    return out


# Values that are sometimes wrong: ints that may be 0/negative/bool/float, NumPy and JAX scalars.
def int_like(lo=-2, hi=40):
    base = st.integers(lo, hi)
    return st.one_of(
        base,
        base.map(np.int64),
        base.map(lambda v: jnp.int32(v)),
        st.sampled_from([True, 2.5, "3", None]),
    )


def score_rows(draw, rows, n):
    kind = draw(st.sampled_from(["random", "ties", "special"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    if kind == "random":
        return rng.standard_normal((rows, n)).astype(np.float32)
    if kind == "ties":
        return rng.integers(0, 3, (rows, n)).astype(np.float32)
    s = rng.integers(-2, 2, (rows, n)).astype(np.float32)
    pick = rng.random((rows, n))
    s[pick < 0.2] = np.nan
    s[(pick >= 0.2) & (pick < 0.35)] = -np.inf
    s[(pick >= 0.35) & (pick < 0.45)] = -0.0
    return s


@st.composite
def topk_case(draw):
    rows, n = draw(st.integers(0, 4)), draw(st.integers(1, 48))
    scores = score_rows(draw, rows, n)
    lens = np.array([draw(st.integers(-3, n + 3)) for _ in range(rows)], np.int64)
    k = draw(int_like())
    dtype = draw(st.sampled_from([np.float32, np.float32, jnp.bfloat16, np.int32]))
    as_list = draw(st.booleans())
    return scores, lens, k, dtype, as_list


@SETTINGS
@given(topk_case())
def test_topk_contract_or_named_error(case):
    scores, lens, k, dtype, as_list = case
    s = jnp.asarray(scores).astype(dtype)
    lengths = lens.tolist() if as_list else lens
    out = valid_or_named_error(lambda: dj.topk(s, lengths, k, implementation="reference"))
    if out is None:
        return
    kk = int(k)
    vals = np.asarray(s.astype(jnp.float32))
    want = [oracle.topk_row(vals[r], int(lens[r]), kk) for r in range(len(lens))]
    np.testing.assert_array_equal(
        np.asarray(out).reshape(len(lens), kk), np.array(want).reshape(len(lens), kk)
    )


@st.composite
def blocks_case(draw):
    rows, nb = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    b = draw(st.sampled_from([1, 2, 4, 8]))
    scores = score_rows(draw, rows, nb * b)
    lens = np.array([draw(st.integers(0, nb * b)) for _ in range(rows)], np.int32)
    pin = draw(st.sampled_from([True, False, "no", 1]))
    c = draw(int_like(-1, 14))
    return scores, lens, b, pin, c


@SETTINGS
@given(blocks_case())
def test_block_ops_contract_or_named_error(case):
    scores, lens, b, pin, c = case
    amax = valid_or_named_error(
        lambda: dj.block_amax(
            jnp.asarray(scores),
            jnp.asarray(lens),
            block_size=b,
            pin_newest=pin,
            implementation="reference",
        )
    )
    if amax is not None:
        nb = -(-scores.shape[1] // b)
        want = [
            oracle.block_amax_row(scores[r], int(lens[r]), b, nb, bool(pin))
            for r in range(len(lens))
        ]
        np.testing.assert_array_equal(np.asarray(amax), np.array(want, np.float32))
    block_scores = jnp.asarray(scores[:, : max(1, scores.shape[1] // b)])
    picked = valid_or_named_error(
        lambda: dj.select_candidate_blocks(
            block_scores,
            jnp.asarray(np.minimum(lens, block_scores.shape[1] * b)),
            num_candidates=c,
            block_size=b,
            implementation="reference",
        )
    )
    if picked is not None:
        bsn = np.asarray(block_scores)
        ln = np.minimum(lens, bsn.shape[1] * b)
        want = [oracle.candidate_row(bsn[r], int(ln[r]), int(c), b) for r in range(len(lens))]
        np.testing.assert_array_equal(np.asarray(picked), np.array(want))


@st.composite
def pages_case(draw):
    rows, pages = draw(st.integers(1, 3)), draw(st.integers(0, 4))
    page_size = draw(st.sampled_from([8, 16, 0, -8]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    table = rng.integers(-1, 20, (rows, pages)).astype(np.int32)
    k = draw(st.integers(1, 6))
    idx = rng.integers(-1, max(1, pages * abs(page_size) + 3), (rows, k)).astype(np.int32)
    return table, idx, page_size


@SETTINGS
@given(pages_case())
def test_logical_to_physical_contract_or_named_error(case):
    table, idx, p = case
    out = valid_or_named_error(
        lambda: dj.logical_to_physical(
            jnp.asarray(idx), jnp.asarray(table), p, implementation="reference"
        )
    )
    if out is not None:
        want = [oracle.physical_row(idx[r], table[r], p) for r in range(len(idx))]
        np.testing.assert_array_equal(np.asarray(out), np.array(want))


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: dj.topk(jnp.zeros((2, 8)), jnp.ones(2, jnp.int32), 2, implementation=5),
            "implementation",
        ),
        (
            lambda: dj.topk(jnp.zeros((2, 8)), jnp.ones(2, jnp.int32), 2, implementation=[]),
            "empty sequence",
        ),
        (
            lambda: dj.topk(jnp.zeros((2, 8)), jnp.ones(2, jnp.int32), 2, implementation="cuda"),
            "unknown implementation",
        ),
        (lambda: dj.topk([[1.0, 2.0]], [2], 1), "scores must be float32"),  # Python floats
        (lambda: dj.topk(np.float32([[1.0, 2.0]]), [2], 1, implementation="reference"), None),
        (lambda: dj.topk(jnp.zeros((2, 8)), [[1], [2, 3]], 2), "lengths must be an array"),
        (lambda: dj.topk(jnp.zeros((2, 8)), jnp.ones(2, jnp.int32), jnp.int32(3)), None),
        (
            lambda: dj.block_amax(jnp.zeros((1, 8)), jnp.ones(1, jnp.int32), pin_newest="no"),
            "pin_newest must be a bool",
        ),
        (lambda: dj.PagedIndexCache.zeros(-1, 64, 128), "num_pages"),
        (lambda: dj.PagedIndexCache.zeros(4.5, 64, 128), "num_pages"),
        (lambda: dj.PagedIndexCache.zeros(4, 0, 128), "page_size"),
        (lambda: dj.PagedIndexCache.zeros(4, 64, 100, "mxfp4"), "head_dim"),
        (lambda: dj.IndexerConfig(index_topk=np.int64(512)), None),
        (
            lambda: dj.write_cache(jnp.zeros((4, 16, 1, 68), jnp.uint8), jnp.ones((2, 64)), [0, 1]),
            "cache must be a PagedIndexCache",
        ),
        (lambda: dj.write_cache(dj.PagedIndexCache.zeros(2, 16, 64), [[1.0] * 63], [0]), "keys"),
        (lambda: dj.write_cache(dj.PagedIndexCache.zeros(2, 16, 64), [[1.0] * 64], [0]), None),
        (lambda: dj.quantize_queries([[[[1.0] * 64]]], [[[1.0]]]), None),
        (lambda: dj.quantize_queries([[[[1] * 64]]], [[[1.0]]]), "q must have a floating"),
        (lambda: dj.quantize_keys([[1.0] * 64]), None),
        (lambda: dj.PagedIndexCache([[0] * 68]), "PagedIndexCache.data must be an array"),
        (
            lambda: dj.KeyBuffer(jnp.zeros((4, 64), jnp.float8_e4m3fn), jnp.zeros((5,))),
            "KeyBuffer.scales must have shape \\(4,\\)",
        ),
        (lambda: dj.KeyBuffer(jnp.zeros((4, 64)), jnp.zeros((4,))), "quantize_keys"),
        (
            lambda: dj.KeyBuffer(
                jnp.zeros((4, 32), jnp.uint8), jnp.zeros((4, 1), jnp.uint8), "mxfp4"
            ),
            "KeyBuffer.scales must have shape \\(4, 2\\)",
        ),
        (
            lambda: dj.topk(jnp.zeros((2, 8)), jnp.ones(2, jnp.int32), 2**40),
            "k must be at most 2\\*\\*31 - 1",
        ),
        (lambda: dj.IndexerConfig(index_topk=2**40), None),
    ],
)
def test_new_user_errors(call, match):
    if match is None:
        call()  # accepted
        return
    with pytest.raises(ValueError, match=match):
        call()


def test_traced_k_gets_a_static_hint():
    import jax

    f = jax.jit(lambda s, n, k: dj.topk(s, n, k))
    with pytest.raises(ValueError, match="static"):
        f(jnp.zeros((2, 8)), jnp.ones(2, jnp.int32), 3)


def test_prefill_starts_after_ends_and_lengths_past_columns_raise(rng):
    from factories import paged_cache, query

    cache, bt = paged_cache(rng, 2, 2, 16, 64)
    q = query(rng, 2, 1, 4, 64)
    with pytest.raises(ValueError, match="context_lens must lie in"):
        dj.paged_mqa_logits(q, cache, jnp.array([5, 30]), bt, num_columns=16)
    keys = dj.quantize_keys(jnp.ones((10, 64), jnp.float32))
    with pytest.raises(ValueError, match="starts must be <= ends"):
        dj.mqa_logits(q, keys, jnp.array([3, 5]), jnp.array([4, 2]))
    with pytest.raises(ValueError, match="quantize_queries"):
        dj.paged_mqa_logits(jnp.zeros((2, 1, 4, 64)), cache, jnp.array([5, 6]), bt)


def test_unavailable_gpu_path_is_extension_unavailable():
    if __import__("jax").default_backend() == "gpu":
        pytest.skip("CPU-only check")
    with pytest.raises(dj.ExtensionUnavailable):
        dj.topk(jnp.zeros((2, 8)), jnp.ones(2, jnp.int32), 2, implementation="ffi")


@st.composite
def prefill_case(draw):
    """Random packed prefill rows: T keys, rows with any 0 <= start <= end <= T, a row chunk."""
    t = draw(st.integers(1, 40))
    rows = draw(st.integers(1, 9))
    pairs = [sorted(draw(st.tuples(st.integers(0, t), st.integers(0, t)))) for _ in range(rows)]
    seed = draw(st.integers(0, 2**31))
    return t, np.array(pairs, np.int32), draw(st.integers(1, 10)), seed


@settings(SETTINGS, max_examples=15)  # each example compiles the prefill path a few times
@given(prefill_case())
def test_prefill_layouts_and_chunks_agree(case):
    """The relative layout is the absolute one shifted by `starts`; publish/select in row chunks
    equal the unchunked calls exactly; every selection stays inside its row's range."""
    t, ranges, chunk, seed = case
    rng = np.random.default_rng(seed)
    cfg = small_config(index_topk=5, candidate_topk_blocks=2, page_size=8)
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((t, 64)), jnp.float32))
    rows = len(ranges)
    q = dj.quantize_queries(
        jnp.asarray(rng.standard_normal((rows, 1, 4, 64)), jnp.float32),
        jnp.asarray(rng.standard_normal((rows, 1, 4)), jnp.float32),
    )
    s, e = jnp.asarray(ranges[:, 0]), jnp.asarray(ranges[:, 1])
    absolute = np.asarray(dj.mqa_logits(q, keys, s, e))
    relative = np.asarray(dj.mqa_logits(q, keys, s, e, relative=True))
    for i, (a, b) in enumerate(ranges):
        np.testing.assert_array_equal(relative[i, : b - a], absolute[i, a:b])
        assert (relative[i, b - a :] == -np.inf).all()
    top, table = dj.publish_prefill(q, keys, s, e, cfg)
    top_c, table_c = dj.publish_prefill(q, keys, s, e, cfg, row_chunk=chunk)
    np.testing.assert_array_equal(np.asarray(top_c), np.asarray(top))
    for x, y in zip(table_c.__dict__.values(), table.__dict__.values()):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    sel = np.asarray(dj.select_prefill(q, keys, s, e, table, cfg, row_chunk=chunk))
    np.testing.assert_array_equal(sel, np.asarray(dj.select_prefill(q, keys, s, e, table, cfg)))
    lens = ranges[:, 1] - ranges[:, 0]
    for out in (np.asarray(top), sel):
        assert ((out == -1) | ((out >= 0) & (out < lens[:, None]))).all()


def test_the_argument_check_needs_a_whole_name():
    assert NAMES_AN_ARGUMENT.search("k must be a positive int")
    assert NAMES_AN_ARGUMENT.search("lengths must lie in [0, 8]")
    assert not NAMES_AN_ARGUMENT.search("the block is not known")  # "k" inside words
    assert not NAMES_AN_ARGUMENT.search("config.candidate_block_size is 4")


# ------------------------------------------ a new user's edge cases: right answer or named error
def test_float64_scores_are_refused_rather_than_ranked_as_float32():
    s = np.array([[1.0, 1.0 + 1e-12, 0.5]])  # NumPy float64, x64 off: would be cast down
    with pytest.raises(ValueError, match="scores must be float32"):
        dj.topk(s, np.array([3]), 1)
    with jax.enable_x64(True):
        with pytest.raises(ValueError, match="scores must be float32"):
            dj.topk(jnp.asarray(s), jnp.array([3]), 1)
        with pytest.raises(ValueError, match="block_scores must be float32"):
            dj.select_candidate_blocks(jnp.asarray(s), jnp.array([24]), num_candidates=2)
        with pytest.raises(ValueError, match="scores must be float32"):
            dj.block_amax(jnp.asarray(s), jnp.array([3]))
    half = jnp.asarray([[1.0, 3.0, 2.0]], jnp.float16)  # exact in float32: accepted
    assert dj.topk(half, jnp.array([3]), 1).tolist() == [[1]]


def test_int64_lengths_saturate_before_they_are_clamped():
    """Under jit with x64 on, int64 lengths past 2**32 clamp to the row, not wrap to 3 or 0."""
    rng = np.random.default_rng(0)
    s = jnp.asarray(rng.standard_normal((3, 40)), jnp.float32)
    want = dj.topk(s, jnp.array([40, 40, 40], jnp.int32), 5)
    with jax.enable_x64(True):
        lens = jnp.array([2**32 + 3, 40, 2**33], jnp.int64)
        got = jax.jit(lambda s, n: dj.topk(s, n, 5))(s, lens)
        starts = jnp.array([-(2**33), 0, 0], jnp.int64)
        from_start = jax.jit(lambda s, n, st: dj.topk(s, n, 5, starts=st))(s, lens, starts)
        blocks = jax.jit(lambda b, n: dj.select_candidate_blocks(b, n, num_candidates=3))(
            s[:, :5], lens
        )
        rows = dj.row_lengths(jnp.array([2**33, 7], jnp.int64), 2)
        slots = dj.logical_to_physical(
            jnp.array([[5, 2**32 + 5]], jnp.int64), jnp.array([[2]], jnp.int64), 64
        )
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(from_start), np.asarray(want))
    full = dj.select_candidate_blocks(s[:, :5], jnp.array([40, 40, 40]), num_candidates=3)
    np.testing.assert_array_equal(np.asarray(blocks), np.asarray(full))
    assert np.asarray(rows).tolist() == [2**31 - 2, 2**31 - 1, 6, 7]
    assert np.asarray(slots).tolist() == [[133, -1]]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(next_n=0), "next_n must be a positive int, got 0"),  # was: []
        (dict(next_n=1, capacity=-5), "capacity must be a non-negative int, got -5"),  # zeros
        (dict(next_n=1, capacity=2.5), "capacity must be a non-negative int, got 2.5"),  # floats
        (dict(next_n=1.0), "next_n must be a positive int, got 1.0"),
    ],
)
def test_row_lengths_refuses_bad_next_n_and_capacity(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        dj.row_lengths(jnp.array([5, 9]), **kwargs)
    with pytest.raises(ValueError, match="context_lens must have an integer dtype"):
        dj.row_lengths(jnp.array([5.0]), 1)
    # A capacity past int32 bounds nothing (was an OverflowError); 0 empties every row.
    assert dj.row_lengths(jnp.array([5, 9]), 2, capacity=2**33).tolist() == [4, 5, 8, 9]
    assert dj.row_lengths(jnp.array([5, 9]), 1, capacity=0).tolist() == [0, 0]


def test_block_size_mismatch_raises_where_the_lengths_can_tell():
    """Block scores of B = 8 selected with B = 4: eagerly the lengths show it (past NB·B); under
    jit they cannot, and the op clamps them as its docstring states."""
    scores = jnp.asarray(np.random.default_rng(0).standard_normal((1, 64)), jnp.float32)
    lens = jnp.array([64])
    blocks = dj.block_amax(scores, lens, block_size=8)
    with pytest.raises(ValueError, match="lengths must lie in \\[0, 32\\]"):
        dj.select_candidate_blocks(blocks, lens, num_candidates=2, block_size=4)
    doc = dj.select_candidate_blocks.__doc__
    assert "same `block_size`" in doc and "clamped" in doc


def test_page_ids_whose_slots_pass_int32_map_to_minus_one():
    got = dj.logical_to_physical(jnp.array([[70, 6]]), jnp.array([[0, 2**30]]), 64)
    assert np.asarray(got).tolist() == [[-1, 6]]
    last = (2**31 - 64) // 64  # the last page whose 64 slots all fit int32
    got = dj.logical_to_physical(jnp.array([[63, 64]]), jnp.array([[last, last + 1]]), 64)
    assert np.asarray(got).tolist() == [[2**31 - 1, -1]]


def test_selection_overlap_takes_rows_as_sets():
    jaccard, recall = dj.selection_overlap(jnp.array([[5, 5, 5]]), jnp.array([[5, -1, -1]]))
    assert float(jaccard[0]) == 1.0 and float(recall[0]) == 1.0
    jaccard, recall = dj.selection_overlap(jnp.array([[1, 2, 3, -1]]), jnp.array([[2, 3, 4, 4]]))
    assert float(jaccard[0]) == 0.5 and abs(float(recall[0]) - 2 / 3) < 1e-6


def test_block_amax_returns_float32_for_bf16_scores():
    s = jnp.asarray([[1.0, 3.5, -2.0, 0.25]], jnp.bfloat16)
    out = dj.block_amax(s, jnp.array([4]), block_size=2, pin_newest=False)
    assert out.dtype == jnp.float32 and np.asarray(out).tolist() == [[3.5, 0.25]]


def test_prefill_keys_must_be_a_keybuffer(rng):
    from factories import query

    cfg = small_config()
    q = query(rng, 3, 1, cfg.num_heads, cfg.head_dim)
    with pytest.raises(ValueError, match="keys must be a KeyBuffer"):
        dj.publish_prefill(
            q, jnp.zeros((10, 64)), jnp.zeros(3, jnp.int32), jnp.ones(3, jnp.int32), cfg
        )


def test_consumer_config_must_match_the_table(rng):
    from factories import paged_cache, query

    cfg = small_config()
    cache, bt = paged_cache(rng, 2, 2, cfg.page_size, cfg.head_dim)
    q = query(rng, 2, 1, cfg.num_heads, cfg.head_dim)
    ctx = jnp.array([5, 30])
    _, table = dj.publish(q, cache, ctx, bt, cfg)
    import dataclasses

    other = dataclasses.replace(cfg, candidate_topk_blocks=cfg.candidate_topk_blocks + 1)
    with pytest.raises(ValueError, match="config.candidate_topk_blocks"):
        dj.select(q, cache, ctx, bt, table, other)
    with pytest.raises(ValueError, match="block_table must have at least one page column"):
        dj.paged_mqa_logits(q, cache, jnp.array([0, 0]), jnp.zeros((2, 0), jnp.int32))


def test_a_cache_relabelled_mxfp4_is_caught_by_the_config(rng):
    """An fp8 cache of D = 64 has the byte rows (68) of an mxfp4 cache of D = 128, so a cache
    relabelled "mxfp4" is read as that: the layer's config, checked against every input, names
    the mismatch."""
    from factories import paged_cache, query

    cfg = small_config()  # fp8, head_dim 64
    cache, bt = paged_cache(rng, 2, 2, cfg.page_size, cfg.head_dim)
    relabelled = dj.PagedIndexCache(cache.data, "mxfp4")
    assert relabelled.head_dim == 128
    q = query(rng, 2, 1, cfg.num_heads, cfg.head_dim)
    with pytest.raises(ValueError, match="config.head_dim is 64 but the inputs have 128"):
        dj.publish(q, relabelled, jnp.array([5, 9]), bt, cfg)


def test_traced_config_field_gets_a_static_hint():
    f = jax.jit(lambda k: dj.IndexerConfig(index_topk=k))
    with pytest.raises(ValueError, match="mark it static"):
        f(512)


def test_caches_stack_scan_and_vmap():
    """Caches and query bundles take leading dimensions: stack a model's layers, scan over them,
    vmap a function that returns caches; an op handed a stacked cache says what to do."""
    cfg = small_config()
    caches = [dj.PagedIndexCache.zeros(4, cfg.page_size, cfg.head_dim) for _ in range(3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *caches)
    assert stacked.data.shape[0] == 3 and stacked.num_pages == 4
    keys = jnp.ones((3, 5, cfg.head_dim))
    written = jax.vmap(lambda c, k: dj.write_cache(c, k, jnp.arange(5)))(stacked, keys)
    assert written.data.shape == stacked.data.shape

    def body(carry, cache):
        return carry + cache.data.sum(dtype=jnp.int32), cache

    total, out = jax.lax.scan(body, jnp.int32(0), written)
    assert out.data.shape == written.data.shape and int(total) > 0
    with pytest.raises(ValueError, match="stacked cache"):
        dj.write_cache(stacked, keys[0], jnp.arange(5))
