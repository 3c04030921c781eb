"""Every public and sharded entry point takes every implementation name and preference order
the same way (on this CPU machine, traced abstractly): a composite (publish, select, the step,
the sharded forms) runs wherever its names include "reference" (the only implementation a CPU
runs), raises ExtensionUnavailable naming the op otherwise, and ValueError for an unknown name
or an empty order; a single op does the same for the names it has and raises ValueError for a
single name it lacks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import dcp_body, packed_keys, paged_cache, query, rank_body, small_config
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import dsv41_jax as dj
from dsv41_jax import sharding

if jax.default_backend() == "gpu":
    pytest.skip("the CPU's view of the names (a GPU runs more of them)", allow_module_level=True)

CFG = small_config()
B = CFG.candidate_block_size
NAMES = [
    None,
    "reference",
    "ffi",
    "pallas",
    ("reference",),
    ("pallas", "ffi", "reference"),
    ("ffi", "pallas"),
    ["pallas", "reference"],
    "triton",
    ("ffi", "triton"),
    (),
]


def outcome(fn, implementation) -> str:
    """ "runs", "unavailable" (ExtensionUnavailable) or "invalid" (ValueError) of
    `fn(implementation)` traced abstractly."""
    try:
        jax.eval_shape(lambda: fn(implementation))
    except dj.ExtensionUnavailable:
        return "unavailable"
    except ValueError:
        return "invalid"
    return "runs"


def expected(implementation, names=("ffi", "pallas", "reference")) -> str:
    """What an entry point whose implementations are `names` does with `implementation` here."""
    if implementation is None:
        return "runs"
    if isinstance(implementation, str):
        if implementation not in {"ffi", "pallas", "reference"}:
            return "invalid"
        if len(names) < 3 and implementation not in names:  # a single op without it
            return "invalid"
        return "runs" if implementation == "reference" else "unavailable"
    if not implementation or set(implementation) - {"ffi", "pallas", "reference"}:
        return "invalid"
    return "runs" if "reference" in implementation else "unavailable"


def _decode_inputs(rng, batch=4, pages=6):
    cache, bt = paged_cache(rng, batch, pages, CFG.page_size, CFG.head_dim)
    q = query(rng, batch, 1, CFG.num_heads, CFG.head_dim)
    lens = jnp.asarray(np.array([0, 9, 40, 96][:batch], np.int32))
    return q, cache, lens, bt


def _entry_points(rng):
    q, cache, lens, bt = _decode_inputs(rng)
    _, table = dj.publish(q, cache, lens, bt, CFG, implementation="reference")
    keys = packed_keys(rng, 64, CFG.head_dim)
    starts = jnp.zeros(4, jnp.int32)
    ends = jnp.array([0, 9, 40, 64], jnp.int32)
    _, ptable = dj.publish_prefill(q, keys, starts, ends, CFG, implementation="reference")
    scores = jnp.zeros((4, 64), jnp.float32)
    mesh = jax.make_mesh((2,), ("x",))
    stacked, tables = jnp.stack([cache.data, cache.data]), jnp.stack([bt, bt])

    def sharded(tree):
        """`tree`'s arrays as abstract values split over the mesh on their first axis."""
        split = NamedSharding(mesh, P("x"))
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=split), tree)

    def step(impl):
        ix = dj.make_two_level_indexer(
            CFG, source_layer=0, consumer_layers=(1,), plain_layers=(2,), implementation=impl
        )
        return ix.decode(dict.fromkeys((0, 1, 2), q), dict.fromkeys((0, 1, 2), cache), lens, bt)

    def dcp(impl):
        @jax.jit
        @dcp_body(mesh, 4)
        def body(q, caches, tables, ctx):
            local = dj.PagedIndexCache(caches[0])
            kw = dict(axis="x", implementation=impl)
            top, t = sharding.dcp_publish(q, local, tables[0], ctx, CFG, **kw)
            return top, sharding.dcp_select(q, local, tables[0], ctx, t, CFG, **kw)

        return jax.eval_shape(body, q, sharded(stacked), sharded(tables), lens)

    def pcp(impl):
        @jax.jit
        @rank_body(mesh, 4)
        def body(q, keys, s, e):
            kw = dict(axis="x", implementation=impl)
            top, t = sharding.pcp_publish_prefill(q, keys, s, e, CFG, **kw)
            return top, sharding.pcp_select_prefill(q, keys, s, e, t, CFG, **kw)

        return jax.eval_shape(body, *(sharded(x) for x in (q, keys, starts, ends)))

    rows = dict(mesh=mesh, axis="x")
    calls = {
        # composites: every op's implementations
        "publish": lambda i: dj.publish(q, cache, lens, bt, CFG, implementation=i),
        "select": lambda i: dj.select(q, cache, lens, bt, table, CFG, implementation=i),
        "select sparse": lambda i: dj.select(
            q, cache, lens, bt, table, CFG, path="sparse", implementation=i
        ),
        "select_plain": lambda i: dj.select_plain(q, cache, lens, bt, CFG, implementation=i),
        "publish_prefill": lambda i: dj.publish_prefill(
            q, keys, starts, ends, CFG, implementation=i
        ),
        "select_prefill": lambda i: dj.select_prefill(
            q, keys, starts, ends, ptable, CFG, implementation=i
        ),
        "select_plain_prefill": lambda i: dj.select_plain_prefill(
            q, keys, starts, ends, CFG, implementation=i
        ),
        "decode step": step,
        "publish_row_sharded": lambda i: sharding.publish_row_sharded(
            q, cache, lens, bt, CFG, implementation=i, **rows
        ),
        "select_row_sharded": lambda i: sharding.select_row_sharded(
            q, cache, lens, bt, table, CFG, implementation=i, **rows
        ),
        "dcp": dcp,
        "pcp": pcp,
        # single ops: their own implementations
        ("topk", ("ffi", "pallas", "reference")): lambda i: dj.topk(
            scores, ends, 8, implementation=i
        ),
        ("select_candidate_blocks", ("ffi", "pallas", "reference")): lambda i: (
            dj.select_candidate_blocks(scores, ends, num_candidates=4, implementation=i)
        ),
        ("paged_mqa_logits", ("ffi", "reference")): lambda i: dj.paged_mqa_logits(
            q, cache, lens, bt, implementation=i
        ),
        ("mqa_logits", ("ffi", "reference")): lambda i: dj.mqa_logits(
            q, keys, starts, ends, implementation=i
        ),
        ("sparse_paged_mqa_logits", ("ffi", "reference")): lambda i: dj.sparse_paged_mqa_logits(
            q, cache, table, lens, bt, block_size=B, implementation=i
        ),
        ("block_amax", ("pallas", "reference")): lambda i: dj.block_amax(
            scores, ends, implementation=i
        ),
        ("sort_candidate_blocks", ("ffi", "reference")): lambda i: dj.sort_candidate_blocks(
            table.blocks, lens, bt, block_size=B, page_size=CFG.page_size, implementation=i
        ),
        ("logical_to_physical", ("ffi", "reference")): lambda i: dj.logical_to_physical(
            table.blocks, bt, CFG.page_size, implementation=i
        ),
    }
    traced = {"dcp", "pcp"}  # they trace themselves (their inputs split over the mesh)
    return {
        k: f if k in traced else (lambda i, f=f: jax.eval_shape(lambda: f(i)))
        for k, f in calls.items()
    }


@pytest.fixture(scope="module")
def entry_points():
    return _entry_points(np.random.default_rng(7))


@pytest.mark.parametrize("implementation", NAMES, ids=repr)
def test_every_entry_point_takes_a_name_the_same_way(entry_points, implementation):
    got, want = {}, {}
    for key, fn in entry_points.items():
        name, names = key if isinstance(key, tuple) else (key, ("ffi", "pallas", "reference"))
        got[name] = outcome(fn, implementation)
        want[name] = expected(implementation, names)
    assert got == want


def test_an_unavailable_composite_names_the_op_that_declined(entry_points):
    with pytest.raises(dj.ExtensionUnavailable, match=r"paged_mqa_logits: no implementation"):
        entry_points["dcp"]("ffi")
    with pytest.raises(dj.ExtensionUnavailable, match=r"topk: no implementation"):
        entry_points["publish"]("pallas")
    with pytest.raises(ValueError, match="unknown implementation names \\['triton'\\]"):
        entry_points["decode step"](("ffi", "triton"))
