"""Row sharding and DCP on 2, 4 and 8 host devices: bitwise equal to the unsharded selection."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import assert_dcp_equal, dcp_body, dcp_step, rank_body, small_config
from jax.sharding import Mesh

import dsv41_jax as dj
from dsv41_jax import sharding

CFG = small_config()


def mesh_of(w: int) -> Mesh:
    if len(jax.devices()) < w:
        pytest.skip(f"needs {w} devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    return Mesh(np.array(jax.devices()[:w]), ("x",))


def tied_keys(rng, n: int, d: int) -> np.ndarray:
    """Keys drawn from 5 distinct vectors: many exactly equal logits, across devices too."""
    table = rng.standard_normal((5, d)).astype(np.float32)
    return table[rng.integers(0, 5, n)]


def paged(rng, keys_per_request: list[np.ndarray], pages: int):
    """A cache holding each request's keys on scattered pages, with its page table."""
    batch, p = len(keys_per_request), CFG.page_size
    perm = rng.permutation(batch * pages).astype(np.int32).reshape(batch, pages)
    keys = np.zeros((batch * pages * p, CFG.head_dim), np.float32)
    for b, kb in enumerate(keys_per_request):
        for t in range(len(kb)):
            keys[perm[b, t // p] * p + t % p] = kb[t]
    cache = dj.write_cache(
        dj.PagedIndexCache.zeros(batch * pages, p, CFG.head_dim),
        jnp.asarray(keys),
        jnp.arange(len(keys), dtype=jnp.int32),
    )
    return cache, jnp.asarray(perm)


def queries(rng, batch, next_n=1):
    q = rng.standard_normal((batch, next_n, 4, 64)).astype(np.float32)
    return dj.quantize_queries(jnp.asarray(q), jnp.ones((batch, next_n, 4), jnp.float32))


# ----------------------------------------------------------------------------- row sharding
@pytest.mark.parametrize("w", [2, 4, 8])
@pytest.mark.parametrize("batch,next_n", [(8, 1), (8, 2), (6, 1)])  # 6 rows: replicated fallback
def test_row_sharded_equals_unsharded(rng, w, batch, next_n):
    mesh = mesh_of(w)
    cfg = dj.IndexerConfig(**{**vars(CFG), "next_n": next_n}) if next_n > 1 else CFG
    pages = 8
    lens = rng.integers(0, pages * 16 + 1, batch).astype(np.int32)
    lens[:3] = [0, 5, pages * 16]
    cache, bt = paged(rng, [tied_keys(rng, pages * 16, 64) for _ in range(batch)], pages)
    q, ctx = queries(rng, batch, next_n), jnp.asarray(lens)
    want_idx, want_table = dj.publish(q, cache, ctx, bt, cfg)
    got_idx, got_table = jax.jit(
        functools.partial(sharding.publish_row_sharded, config=cfg, mesh=mesh, axis="x")
    )(q, cache, ctx, bt)
    np.testing.assert_array_equal(np.asarray(got_idx), np.asarray(want_idx))
    jax.tree.map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
        got_table,
        want_table,
    )
    for path in ("mask", "sparse"):
        got = sharding.select_row_sharded(
            q, cache, ctx, bt, want_table, cfg, mesh=mesh, axis="x", path=path
        )
        want = dj.select(q, cache, ctx, bt, want_table, cfg, path=path)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=path)


def row_inputs(rng, batch: int, pages: int = 2):
    cache, bt = paged(rng, [tied_keys(rng, pages * 16, 64) for _ in range(batch)], pages)
    return queries(rng, batch), cache, jnp.full((batch,), pages * 16, jnp.int32), bt


@pytest.mark.parametrize(
    "axis,match",
    [
        ("tp", "'tp' is not one of the mesh's axis names"),
        (("x",), "pass the axis name as a str, not a tuple"),
    ],
)
def test_row_sharding_rejects_unknown_axis(rng, axis, match):
    q, cache, ctx, bt = row_inputs(rng, 4)
    _, table = dj.publish(q, cache, ctx, bt, CFG)
    with pytest.raises(ValueError, match=match):
        sharding.publish_row_sharded(q, cache, ctx, bt, CFG, mesh=mesh_of(2), axis=axis)
    with pytest.raises(ValueError, match=match):
        sharding.select_row_sharded(q, cache, ctx, bt, table, CFG, mesh=mesh_of(2), axis=axis)


def test_row_sharding_fallback_returns_replicated_outputs(rng):
    """Requests that do not divide over the devices run replicated (with a log line), and the
    outputs are replicated over the mesh as documented, not left on one device."""
    mesh = mesh_of(2)
    q, cache, ctx, bt = row_inputs(rng, 3)
    top, table = sharding.publish_row_sharded(q, cache, ctx, bt, CFG, mesh=mesh, axis="x")
    sel = sharding.select_row_sharded(q, cache, ctx, bt, table, CFG, mesh=mesh, axis="x")
    for out in jax.tree.leaves((top, table, sel)):
        assert out.sharding.is_fully_replicated and len(out.sharding.device_set) == 2
    from dsv41_jax import info

    # Shapes no other test traces: jit's cache would hide the inner trace from `explain`.
    for batch, want in (
        (5, "5 requests do not divide over 2 devices"),
        (10, "5 requests a device"),
    ):
        q, cache, ctx, bt = row_inputs(rng, batch)
        choices = info.explain(
            lambda *a: sharding.publish_row_sharded(*a, CFG, mesh=mesh, axis="x"), q, cache, ctx, bt
        )
        [split] = [c for c in choices if c.op == "row sharding"]
        assert split.plan is not None and split.plan.reason == want, split


# ----------------------------------------------------------------------------- DCP
def dcp_layout(rng, global_keys: list[np.ndarray], w: int, interleave: int, pages_local: int):
    """Stacked per-device caches and page tables holding each device's striped positions."""
    caches, tables = [], []
    for d in range(w):
        local = []
        for kb in global_keys:
            j = np.arange(pages_local * 16)
            g = ((j // interleave) * w + d) * interleave + j % interleave
            kl = np.zeros((len(j), 64), np.float32)
            kl[g < len(kb)] = kb[g[g < len(kb)]]
            local.append(kl)
        cache, bt = paged(rng, local, pages_local)
        caches.append(cache.data)
        tables.append(bt)
    return jnp.stack(caches), jnp.stack(tables)


@pytest.mark.parametrize("w", [2, 4, 8])
@pytest.mark.parametrize("interleave", [1, 2, 3])
@pytest.mark.parametrize("exchange", ["topc", "pmax"])
def test_dcp_equals_unsharded(rng, w, interleave, exchange):
    """Both exchanges, with the "auto" consumer path and the sparse one (one compile for both:
    test_dcp_sparse_consumer_equals_unsharded takes the interleaves past 3)."""
    check_dcp(rng, w, interleave, exchange=exchange, paths=("auto", "sparse"))


def check_dcp(rng, w, interleave, exchange="auto", paths=("auto",)):
    """DCP publish + select (each consumer path in `paths`) over W host devices equals one
    device, bitwise."""
    mesh = mesh_of(w)
    batch, global_pages = 6, 12
    cap = global_pages * 16
    # Lengths off multiples of W·I, below k, and one at capacity.
    lens = np.array([0, 5, 11, min(w * interleave * 7 + 1, cap), 101, cap], np.int32)
    global_keys = [tied_keys(rng, cap, 64) for _ in range(batch)]
    cache, bt = paged(rng, global_keys, global_pages)
    q, ctx = queries(rng, batch), jnp.asarray(lens)
    want_idx, want_table = dj.publish(q, cache, ctx, bt, CFG)
    q2 = queries(rng, batch)
    want_sel = dj.select(q2, cache, ctx, bt, want_table, CFG)

    pages_local = -(-global_pages // w) + 1
    local_caches, local_tables = dcp_layout(rng, global_keys, w, interleave, pages_local)

    step = jax.jit(dcp_both_paths(mesh, CFG, interleave, exchange, paths))
    idx, blocks, count, valid, *sels = step(q, local_caches, local_tables, ctx, q2)
    assert_dcp_equal((idx, blocks, count, valid, sels[0]), want_idx, want_table, want_sel)
    for path, sel in zip(paths, sels, strict=True):
        np.testing.assert_array_equal(np.asarray(sel), np.asarray(want_sel), err_msg=path)


@pytest.mark.parametrize("verified", [False, True])
def test_dcp_auto_path_follows_the_status(rng, monkeypatch, verified):
    """`dcp_select(path="auto")` takes the sparse path exactly when dsv41_jax.status records
    the DCP sparse path as device-verified, and says why not otherwise (info.explain)."""
    from dsv41_jax import info, status

    if verified:
        entry = status.Status("device", "the DCP sparse path", ("H200",))
        monkeypatch.setitem(status.STATUS, "dcp sparse path", entry)
    mesh, batch, global_pages = mesh_of(2), 2, 4
    global_keys = [tied_keys(rng, global_pages * 16, 64) for _ in range(batch)]
    local_caches, local_tables = dcp_layout(rng, global_keys, 2, 1, global_pages // 2 + 1)
    ctx = jnp.full((batch,), global_pages * 16, jnp.int32)
    step = dcp_step(mesh, CFG)
    choices = info.explain(
        step, queries(rng, batch), local_caches, local_tables, ctx, queries(rng, batch)
    )
    [path] = [c for c in choices if c.op == "dcp_select: consumer path"]
    assert path.implementation == ("sparse" if verified else "mask")
    assert path.plan is not None and path.plan.choice == path.implementation
    [exchange] = [c for c in choices if c.op == "dcp_publish: exchange"]
    assert exchange.plan is not None and "blocks <" in exchange.plan.reason  # short rows: pmax
    want = () if verified else (("sparse", "the DCP sparse path is run on host devices only"),)
    assert path.declined == want


# Interleaves 1-3 (local blocks of B / W and single positions) at every W with both exchanges:
# test_dcp_equals_unsharded, which checks the sparse path in the same compile.
@pytest.mark.parametrize("w", [2, 4, 8])
@pytest.mark.parametrize("interleave", [4, 8])
def test_dcp_sparse_consumer_equals_unsharded(rng, w, interleave):
    """The consumer scoring only its device's part of the candidate blocks (a local table of
    blocks of B, of B / W, or of single positions, by the layout) selects what the unsharded
    consumer does, bitwise."""
    check_dcp(rng, w, interleave, paths=("sparse",))


def test_dcp_local_table_is_each_devices_part_of_the_blocks():
    """For every layout, a device's local table holds exactly its positions (below its length)
    whose global block is published, in local blocks of the size the layout gives: B when a
    block lies in one run of I, B / W when its runs spread evenly, else single positions."""
    from dsv41_jax.sharding._dcp_local import local_table

    rng = np.random.default_rng(7)
    for b in (1, 4, 8):
        for w in (1, 2, 3, 4, 8):
            for i in (1, 2, 3, 4, 8, 16):
                length = int(rng.integers(1, 300))
                nb = -(-length // b)
                pick = np.sort(rng.choice(nb, min(6, nb), replace=False))
                blocks = np.full((1, 6), dj.INT32_MAX, np.int32)
                blocks[0, : len(pick)] = pick
                tbl = dj.CandidateTable(
                    jnp.asarray(blocks),
                    jnp.array([len(pick)]),
                    jnp.array([0]),
                    jnp.full((1, 6), -1),
                    block_size=b,
                )
                for r in range(w):
                    n = int(sharding.dcp_local_length(jnp.array([length]), w, r, i)[0])
                    bt = jnp.arange(-(-max(n, 1) // 16), dtype=jnp.int32)[None]
                    loc = local_table(
                        tbl, jnp.array([length]), jnp.array([n]), bt, w, r, i, 16, None
                    )
                    cols = np.arange(int(loc.valid_lens[0]))
                    lb = loc.block_size
                    want_lb = b if i % b == 0 else (b // w if b % i == 0 and b // i % w == 0 else 1)
                    assert lb == want_lb, f"B={b} W={w} I={i}"
                    got = np.asarray(loc.blocks)[0, cols // lb] * lb + cols % lb
                    j = np.arange(n)
                    g = ((j // i) * w + r) * i + j % i
                    want = j[np.isin(g // b, pick)]
                    np.testing.assert_array_equal(got, want, err_msg=f"B={b} W={w} I={i} r={r}")


def test_dcp_position_maps_round_trip():
    for w, i in ((2, 1), (4, 3), (8, 2)):
        g = np.arange(500)
        owner = (g // i) % w
        for d in range(w):
            local = np.arange(int(np.sum(owner == d)))
            back = np.asarray(sharding.dcp_local_to_global(jnp.asarray(local), w, d, i))
            np.testing.assert_array_equal(back, g[owner == d])
            counts = np.asarray(sharding.dcp_local_length(jnp.arange(501), w, d, i))
            np.testing.assert_array_equal(counts, np.concatenate([[0], np.cumsum(owner == d)]))


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: sharding.dcp_local_length(jnp.array([5]), 0, 0, 1), "world must be a positive"),
        (lambda: sharding.dcp_local_length(jnp.array([5]), 2, 2, 1), r"rank must lie in \[0, "),
        (lambda: sharding.dcp_local_length(jnp.array([5]), 2, 0, 0), "interleave must be a pos"),
        (lambda: sharding.dcp_local_length(jnp.array([5.0]), 2, 0, 1), "global_lens must have"),
        (lambda: sharding.dcp_local_to_global(jnp.array([5]), 2, -1, 1), "rank must lie in"),
        (lambda: sharding.dcp_local_to_global(jnp.array([5]), 2**16, 0, 2**16), "world x inter"),
        (lambda: sharding.dcp_capacity(10, 2, 0), "interleave must be a positive int, got 0"),
        (lambda: sharding.dcp_capacity(10, 0, 1), "world must be a positive int, got 0"),
        (lambda: sharding.dcp_capacity(-1, 2, 1), "local_capacity must be a non-negative int"),
    ],
)
def test_dcp_position_maps_refuse_a_bad_layout(call, message):
    """world=0 gave [-2] and interleave=0 a ZeroDivisionError; each is a ValueError naming it."""
    with pytest.raises(ValueError, match=message):
        call()


def test_dcp_global_positions_past_int32_are_minus_one():
    """Local position 2**30 on rank 1 of 2 is global 2**31 + 1: -1, not a wrapped position; the
    last global position that fits keeps its id."""
    got = sharding.dcp_local_to_global(jnp.array([2**30, 2**30 - 1, 5, -1]), 2, 1, 1)
    assert np.asarray(got).tolist() == [-1, 2**31 - 1, 11, -1]
    got = sharding.dcp_local_to_global(jnp.array([2**30 - 1, 2**30]), 2, 0, 1)
    assert np.asarray(got).tolist() == [2**31 - 2, -1]


# ----------------------------------------------------------------------------- prefill CP
@pytest.mark.parametrize("w", [2, 4, 8])
@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_pcp_prefill_equals_one_device(rng, w, fmt):
    """Keys split over W ranks by the padding rule (equal chunks, the last zero-padded), query
    rows split over the ranks too: every rank's publish and select equal one device's rows."""

    from factories import query

    mesh = mesh_of(w)
    cfg = small_config(cache_format=fmt)
    t, rows = 90, 2 * w
    raw = rng.standard_normal((t, cfg.head_dim)).astype(np.float32)
    keys = dj.quantize_keys(jnp.asarray(raw), fmt)
    starts = rng.integers(0, t + 1, rows).astype(np.int32)
    ends = np.array([rng.integers(s, t + 1) for s in starts], np.int32)
    starts[:2], ends[:2] = [0, 30], [t, 30]  # the whole buffer, an empty row
    st, en = jnp.asarray(starts), jnp.asarray(ends)
    q = query(rng, rows, 1, cfg.num_heads, cfg.head_dim, fmt)
    q2 = query(rng, rows, 1, cfg.num_heads, cfg.head_dim, fmt)
    want_idx, want_table = dj.publish_prefill(q, keys, st, en, cfg)
    want_sel = dj.select_prefill(q2, keys, st, en, want_table, cfg)

    chunk = -(-t // w)  # the padding rule: W equal chunks, the last zero-padded
    pad = lambda x: jnp.pad(x, [(0, chunk * w - t)] + [(0, 0)] * (x.ndim - 1))  # noqa: E731
    padded = dj.KeyBuffer(pad(keys.values), pad(keys.scales), fmt)

    @jax.jit
    @rank_body(mesh, 5)
    def step(qa, qb, mine, st, en):
        idx, table = sharding.pcp_publish_prefill(qa, mine, st, en, cfg, axis="x")
        sel = sharding.pcp_select_prefill(qb, mine, st, en, table, cfg, axis="x")
        return idx, table.blocks, table.count, table.valid_lens, table.physical, sel

    got = step(q, q2, padded, st, en)
    want = (
        want_idx,
        want_table.blocks,
        want_table.count,
        want_table.valid_lens,
        want_table.physical,
        want_sel,
    )
    for name, g, x in zip(("top-k", "blocks", "count", "valid", "physical", "select"), got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(x), err_msg=name)


# ------------------------------------------- DCP with speculative rows and lengths at every edge
def dcp_both_paths(mesh, cfg, interleave, exchange, paths=("mask", "sparse")):
    """DCP publish and the consumer paths in one shard_map body (one compile for all three)."""

    @dcp_body(mesh)
    def step(q, caches, tables, ctx, q2):
        local = dj.PagedIndexCache(caches[0])
        kw = dict(axis="x", interleave=interleave)
        idx, table = sharding.dcp_publish(q, local, tables[0], ctx, cfg, exchange=exchange, **kw)
        sels = [
            sharding.dcp_select(q2, local, tables[0], ctx, table, cfg, path=p, **kw) for p in paths
        ]
        return idx, table.blocks, table.count, table.valid_lens, *sels

    return step


def check_dcp_edges(rng, w, interleaves, next_n, eager=False, paths=("mask", "sparse")):
    """DCP publish and both consumer paths, for each interleave, on lengths 0, 1, 2, k ± 1,
    capacity - 1, capacity and past it: bitwise one device's publish and select with the lengths
    clamped to the capacity the devices hold together (as one device clamps to its own)."""
    mesh = mesh_of(w)
    cfg = small_config(next_n=next_n)
    k, pages_local = cfg.index_topk, 3
    batch, global_pages = 9, -(-w * pages_local * 16 // 16)
    global_keys = [tied_keys(rng, global_pages * 16, 64) for _ in range(batch)]
    cache, bt = paged(rng, global_keys, global_pages)
    q, q2 = queries(rng, batch, next_n), queries(rng, batch, next_n)
    wants = {}
    for interleave in interleaves:
        cap = sharding.dcp_capacity(pages_local * 16, w, interleave)
        lens = np.array([0, 1, 2, k - 1, k + 1, cap - 1, cap, cap + 5, 9999], np.int32)
        if cap not in wants:
            clamped = jnp.asarray(np.minimum(lens, cap))
            idx, table = dj.publish(q, cache, clamped, bt, cfg)
            sel = dj.select(q2, cache, clamped, bt, table, cfg, path="mask")
            wants[cap] = (idx, table.blocks, table.count, table.valid_lens, sel, sel)
        local_caches, local_tables = dcp_layout(rng, global_keys, w, interleave, pages_local)
        exchange = "topc" if interleave % 2 else "pmax"
        step = dcp_both_paths(mesh, cfg, interleave, exchange, paths)
        got = (step if eager else jax.jit(step))(
            q, local_caches, local_tables, jnp.asarray(lens), q2
        )
        names = ("top-k", "blocks", "count", "valid_lens", *(f"{p} select" for p in paths))
        for name, g, x in zip(names, got, wants[cap]):
            np.testing.assert_array_equal(
                np.asarray(g), np.asarray(x), err_msg=f"I={interleave} {name}"
            )


def test_dcp_speculative_rows_at_every_interleave_equal_one_device(rng):
    """next_n = 2 on 2 devices, interleaves 1-8. Before the fix the logits kernels were given
    each request's local length, so a device's row j saw `L_local - next_n + 1 + j` positions
    instead of its own share of the row's `L - next_n + 1 + j` (I=1: a length-2 request's first
    row lost its only position on device 0)."""
    check_dcp_edges(rng, 2, range(1, 9), next_n=2)


@pytest.mark.parametrize("w,interleave,next_n", [(4, 3, 2), (8, 2, 1)])
def test_dcp_edge_lengths_on_more_devices_equal_one_device(rng, w, interleave, next_n):
    check_dcp_edges(rng, w, [interleave], next_n)


def test_dcp_eager_shard_map_equals_one_device(rng):
    """Without jit (JAX compiles each primitive of the body on its own: slow, so the mask path
    only): inside shard_map the lengths are still tracers, clamped the same way."""
    check_dcp_edges(rng, 2, [3], next_n=2, eager=True, paths=("mask",))


def test_dcp_capacity_is_what_every_device_holds():
    for w in (1, 2, 3, 8):
        for i in (1, 2, 3, 5, 8):
            for local_cap in (1, 7, 16, 48):
                g = sharding.dcp_capacity(local_cap, w, i)
                held = [
                    int(sharding.dcp_local_length(jnp.array([g]), w, r, i)[0]) for r in range(w)
                ]
                assert max(held) <= local_cap, (w, i, local_cap)
                # One more global position would need a position past some device's capacity.
                more = [
                    int(sharding.dcp_local_length(jnp.array([g + 1]), w, r, i)[0]) for r in range(w)
                ]
                assert max(more) > local_cap, (w, i, local_cap)


def test_pcp_traced_ranges_past_the_keys_equal_one_device(rng):
    """Ends past T (and negative starts), traced: PCP clamps them to the T real keys as one
    device does, not to the padded gathered buffer (W·ceil(T/W) keys, whose zero keys a row
    would otherwise see); `num_keys` is what tells T."""

    from factories import query

    w, t = 4, 90  # chunks of 23: two padding keys
    mesh = mesh_of(w)
    cfg = small_config()
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((t, cfg.head_dim)), jnp.float32))
    starts = jnp.array([-3, 0, 80, 85, 0, 88, 10, 95], jnp.int32)
    ends = jnp.array([99, 92, 91, 200, 30, 89, 5, 97], jnp.int32)
    q, q2 = (query(rng, 2 * w, 1, cfg.num_heads, cfg.head_dim) for _ in range(2))

    def one_device(qa, qb, s, e):
        idx, table = dj.publish_prefill(qa, keys, s, e, cfg)
        return idx, table, dj.select_prefill(qb, keys, s, e, table, cfg)

    want = jax.jit(one_device)(q, q2, starts, ends)
    chunk = -(-t // w)
    pad = lambda x: jnp.pad(x, [(0, chunk * w - t)] + [(0, 0)] * (x.ndim - 1))  # noqa: E731
    padded = dj.KeyBuffer(pad(keys.values), pad(keys.scales))

    @jax.jit
    @rank_body(mesh, 5)
    def step(qa, qb, mine, s, e):
        kw = dict(axis="x", num_keys=t)
        idx, table = sharding.pcp_publish_prefill(qa, mine, s, e, cfg, **kw)
        return idx, table, sharding.pcp_select_prefill(qb, mine, s, e, table, cfg, **kw)

    got = step(q, q2, padded, starts, ends)
    for g, x in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(x))

    @rank_body(mesh, 4)
    def wrong_t(qa, mine, s, e):
        return sharding.pcp_publish_prefill(qa, mine, s, e, cfg, axis="x", num_keys=60)[0]

    with pytest.raises(ValueError, match=r"num_keys must be the T keys before padding.*\(69, 92\]"):
        jax.jit(wrong_t)(q, padded, starts, ends)


def test_dcp_select_inside_a_hand_made_table_equals_one_device(rng):
    """Repeated, unordered, negative, out-of-row and wrapping block ids with junk count /
    valid_lens / physical: both DCP consumer paths select what one device's mask path does."""

    w, next_n, m = 2, 2, dj.INT32_MAX
    mesh, cfg = mesh_of(w), small_config(next_n=next_n)
    batch, global_pages, pages_local = 3, 6, 3
    lens = np.array([30, 2, 96], np.int32)
    global_keys = [tied_keys(rng, global_pages * 16, 64) for _ in range(batch)]
    cache, bt = paged(rng, global_keys, global_pages)
    q = queries(rng, batch, next_n)
    rows = [[1, 1, 3, 3, 2, m], [-1, 20, 0, m, m, m], [7, 5, 2**30, 6, -(2**31), 23]]
    blocks = jnp.asarray(np.repeat(np.array(rows, np.int32), next_n, axis=0))
    n = len(blocks)
    table = dj.CandidateTable(
        blocks, jnp.full((n,), 2), jnp.full((n,), 7), jnp.full((n, 6), 3), block_size=4
    )
    want = dj.select(q, cache, jnp.asarray(lens), bt, table, cfg, path="mask")
    assert (np.asarray(want) >= 0).sum() > 0
    for interleave in (1, 3, 8):
        local_caches, local_tables = dcp_layout(rng, global_keys, w, interleave, pages_local)

        @jax.jit
        @dcp_body(mesh)
        def consumers(q, caches, tables, ctx, t):
            local = dj.PagedIndexCache(caches[0])
            kw = dict(axis="x", interleave=interleave)  # noqa: B023 - traced right here
            return [
                sharding.dcp_select(q, local, tables[0], ctx, t, cfg, path=p, **kw)
                for p in ("mask", "sparse")
            ]

        got = consumers(q, local_caches, local_tables, jnp.asarray(lens), table)
        for path, sel in zip(("mask", "sparse"), got):
            np.testing.assert_array_equal(np.asarray(sel), np.asarray(want), err_msg=f"{path}")


# ----------------------------------------------------------------- DCP with denormal logits
def dcp_logits_from(table, world: int, interleave: int):
    """Stand-ins for the two logits ops DCP calls inside its shard_map: local position j of each
    device scores `table[row, g]` at its global position g (1.0 past the table), whatever the
    query and cache hold."""
    from dsv41_jax import sparse_columns_to_positions

    def score(local):  # int32 [rows, cols] local positions, -1 for none
        g = sharding.dcp_local_to_global(local, world, jax.lax.axis_index("x"), interleave)
        vals = jnp.take_along_axis(table, jnp.clip(g, 0, table.shape[1] - 1), axis=1)
        return jnp.where((g >= 0) & (g < table.shape[1]), vals, 1.0)

    def paged(query, cache, lens, bt, *, implementation=None):
        width = -(-bt.shape[1] * cache.page_size // 256) * 256  # the op's default width
        return score(jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (len(lens), width)))

    def sparse(query, cache, local, lens, bt, *, block_size, implementation=None):
        width = local.blocks.shape[1] * block_size
        cols = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (len(lens), width))
        return score(sparse_columns_to_positions(cols, local, block_size))

    return paged, sparse


@pytest.mark.parametrize("w,interleave", [(2, 1), (4, 2), (2, 3)])
@pytest.mark.parametrize("exchange", ["topc", "pmax"])
def test_dcp_orders_denormal_logits_as_the_contract(rng, monkeypatch, w, interleave, exchange):
    """Denormal logits of both signs and +-0.0 (XLA's CPU backend flushes denormals to zero in
    float compares and max): DCP's local selects, block maxima, exchange and merges give the
    NumPy oracle's one-device top-k, table and consumer selections (both paths). Interleave 1
    takes the local block_amax, the others the scattered block maxima."""
    import oracle
    from factories import scores as make_scores

    from dsv41_jax.sharding import dcp

    mesh = mesh_of(w)
    k, c, b = CFG.index_topk, CFG.candidate_topk_blocks, CFG.candidate_block_size
    batch, pages_local = 6, 3
    cap = sharding.dcp_capacity(pages_local * 16, w, interleave)
    lens = np.array([0, 5, k + 1, c * b + 3, cap - 1, cap], np.int32)
    logits = make_scores(rng, batch, cap, "denormal")
    logits[np.arange(cap)[None] >= lens[:, None]] = 1.0  # past the row: would outrank the rest
    paged_logits, sparse_logits = dcp_logits_from(jnp.asarray(logits), w, interleave)
    monkeypatch.setattr(dcp, "paged_mqa_logits", paged_logits)
    monkeypatch.setattr(dcp, "sparse_paged_mqa_logits", sparse_logits)
    caches = jnp.stack([dj.PagedIndexCache.zeros(batch * pages_local, 16, 64).data] * w)
    pages = np.arange(batch * pages_local, dtype=np.int32).reshape(batch, pages_local)
    q = queries(rng, batch)
    step = jax.jit(dcp_both_paths(mesh, CFG, interleave, exchange))
    idx, blocks, count, valid, *sels = step(
        q, caches, jnp.asarray(np.stack([pages] * w)), jnp.asarray(lens), q
    )

    nb = -(-cap // b)
    want_idx = [oracle.topk_row(logits[r], int(lens[r]), k) for r in range(batch)]
    want_table = []
    for r in range(batch):
        block_scores = oracle.block_amax_row(logits[r], int(lens[r]), b, nb, True)
        selected = oracle.candidate_row(block_scores, int(lens[r]), c, b)
        want_table.append(oracle.table_row(selected, int(lens[r]), range(nb), b, CFG.page_size))
    want_blocks = np.array([t[0] for t in want_table])
    want_sel = oracle.topk_inside_blocks(logits, lens, want_blocks, k, b)
    np.testing.assert_array_equal(np.asarray(idx), want_idx)
    np.testing.assert_array_equal(np.asarray(blocks), want_blocks)
    np.testing.assert_array_equal(np.asarray(count), [t[1] for t in want_table])
    np.testing.assert_array_equal(np.asarray(valid), [t[2] for t in want_table])
    for path, sel in zip(("mask", "sparse"), sels, strict=True):
        np.testing.assert_array_equal(np.asarray(sel), want_sel, err_msg=path)


# ------------------------------- implementation= and topk_algorithm= as in the unsharded ops
# Every name and preference order the unsharded ops take; on a CPU "ffi" and "pallas" alone
# raise ExtensionUnavailable there, and the sharded entry points must raise the same.
IMPLEMENTATIONS = (
    None,
    "reference",
    "ffi",
    "pallas",
    ("pallas", "reference"),
    ("ffi", "pallas", "reference"),
)


def outcome(fn):
    """`fn()` as numpy leaves, or the name of the exception it raised."""
    try:
        return jax.tree.map(np.asarray, fn())
    except Exception as e:  # noqa: BLE001 - compared with the unsharded op's outcome
        return type(e).__name__


def assert_same_outcome(got, want, what):
    if isinstance(want, str) or isinstance(got, str):
        assert want != "ValueError", f"{what}: the unsharded op refuses it"
        assert got == want, what
        return
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(g, w, err_msg=str(what))


def forced_selects(choices) -> set:
    """The forced select of every selection op's plan among `info.explain`'s choices."""
    return {c.plan.topk_algorithm for c in choices if isinstance(c.plan, dj.Plan)}


def dcp_inputs(rng, w=2, interleave=1):
    batch, global_pages = 4, 8
    cap = global_pages * 16
    global_keys = [tied_keys(rng, cap, 64) for _ in range(batch)]
    cache, bt = paged(rng, global_keys, global_pages)
    ctx = jnp.asarray(np.array([0, 5, 77, cap], np.int32))
    local = dcp_layout(rng, global_keys, w, interleave, -(-global_pages // w) + 1)
    return (cache, bt), (queries(rng, batch), *local, ctx, queries(rng, batch))


def pcp_inputs(rng, w=2):
    from factories import query

    t, rows = 45, 2 * w
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((t, 64)).astype(np.float32)))
    starts = rng.integers(0, t + 1, rows).astype(np.int32)
    ends = np.array([rng.integers(s, t + 1) for s in starts], np.int32)
    chunk = -(-t // w)
    pad = lambda x: jnp.pad(x, [(0, chunk * w - t)] + [(0, 0)] * (x.ndim - 1))  # noqa: E731
    q, q2 = (query(rng, rows, 1, CFG.num_heads, CFG.head_dim) for _ in range(2))
    st, en = jnp.asarray(starts), jnp.asarray(ends)
    return keys, (q, q2, dj.KeyBuffer(pad(keys.values), pad(keys.scales), keys.format), st, en), t


def pcp_step(mesh, num_keys, **kw):
    @jax.jit
    @rank_body(mesh, 5)
    def step(qa, qb, mine, st, en):
        ops = sharding.pcp_publish_prefill, sharding.pcp_select_prefill
        return publish_and_select(*ops, qa, qb, (mine, st, en), axis="x", num_keys=num_keys, **kw)

    return step


def publish_and_select(publish, select, q, q2, inputs, **kw):
    """`publish` of `q` then `select` of `q2` in its table, over the same `inputs` and CFG (the
    decode or the prefill pair, sharded or not): (top-k, blocks, count, valid_lens, selection)."""
    idx, table = publish(q, *inputs, CFG, **kw)
    sel = select(q2, *inputs, table, CFG, **kw)
    return idx, table.blocks, table.count, table.valid_lens, sel


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_row_sharding_takes_every_implementation_name(rng, impl):
    mesh = mesh_of(2)
    q, cache, ctx, bt = row_inputs(rng, 4)
    kw = dict(implementation=impl)
    want = outcome(lambda: dj.publish(q, cache, ctx, bt, CFG, **kw))
    got = outcome(
        lambda: sharding.publish_row_sharded(q, cache, ctx, bt, CFG, mesh=mesh, axis="x", **kw)
    )
    assert_same_outcome(got, want, ("publish_row_sharded", impl))
    _, table = dj.publish(q, cache, ctx, bt, CFG)
    want = outcome(lambda: dj.select(q, cache, ctx, bt, table, CFG, **kw))
    got = outcome(
        lambda: sharding.select_row_sharded(
            q, cache, ctx, bt, table, CFG, mesh=mesh, axis="x", **kw
        )
    )
    assert_same_outcome(got, want, ("select_row_sharded", impl))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("scheme", ["dcp", "pcp"])
def test_context_parallelism_takes_every_implementation_name(rng, scheme, impl):
    """`dcp_publish` / `dcp_select` read `implementation=` as `publish` / `select` do (a single
    name is a preference: "pallas" runs the Pallas selects and the logits' own order), and the
    PCP pair as `publish_prefill` / `select_prefill` do."""
    if scheme == "dcp":
        (cache, bt), args = dcp_inputs(rng)
        q, _, _, ctx, q2 = args
        ops, inputs = (dj.publish, dj.select), (cache, ctx, bt)
        step = lambda: dcp_step(mesh_of(2), CFG, implementation=impl)  # noqa: E731
    else:
        keys, args, t = pcp_inputs(rng)
        q, q2, _, st, en = args
        ops, inputs = (dj.publish_prefill, dj.select_prefill), (keys, st, en)
        step = lambda: pcp_step(mesh_of(2), t, implementation=impl)  # noqa: E731
    want = outcome(lambda: publish_and_select(*ops, q, q2, inputs, implementation=impl))
    assert_same_outcome(outcome(lambda: step()(*args)), want, (scheme, impl))


def test_every_sharded_entry_point_forwards_topk_algorithm(rng):
    """Each forced select reaches every planned op of every sharded entry point, and each one
    is a trace of its own: the same entry point asked for another select plans again (a stale
    trace would show the previous select, or no op at all)."""
    from dsv41_jax import info

    jax.clear_caches()  # the row-sharded entry points' inner jit: no trace from an earlier test
    mesh = mesh_of(2)
    q, cache, ctx, bt = row_inputs(rng, 4)
    _, table = dj.publish(q, cache, ctx, bt, CFG)
    (_, _), dcp_args = dcp_inputs(rng)
    _, pcp_args, t = pcp_inputs(rng)
    for forced in ("short", "filter", "cluster"):
        kw = dict(mesh=mesh, axis="x", topk_algorithm=forced)
        choices = {
            "publish_row_sharded": info.explain(
                lambda *a: sharding.publish_row_sharded(*a, CFG, **kw), q, cache, ctx, bt
            ),
            "select_row_sharded": info.explain(
                lambda *a: sharding.select_row_sharded(*a, CFG, path="mask", **kw),
                q,
                cache,
                ctx,
                bt,
                table,
            ),
            "dcp": info.explain(dcp_step(mesh, CFG, topk_algorithm=forced), *dcp_args),
            "pcp": info.explain(pcp_step(mesh, t, topk_algorithm=forced), *pcp_args),
        }
        for name, got in choices.items():
            assert forced_selects(got) == {forced}, (name, forced, forced_selects(got))
    with pytest.raises(ValueError, match="topk_algorithm must be None or one of"):
        sharding.publish_row_sharded(
            q, cache, ctx, bt, CFG, mesh=mesh, axis="x", topk_algorithm="fast"
        )
    with pytest.raises(ValueError, match="topk_algorithm must be None or one of"):
        dcp_step(mesh, CFG, topk_algorithm="fast")(*dcp_args)
