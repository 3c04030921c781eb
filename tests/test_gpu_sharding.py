"""Row sharding and DCP on every visible GPU (2 on the x2 device machine), for each
implementation: bitwise equal to the unsharded single-GPU result. Also: an eager shard_map that
reaches the FFI kernels must not crash the process."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from factories import assert_dcp_equal, dcp_step, paged_cache, query
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import dsv41_jax as dj
from dsv41_jax import sharding

pytestmark = pytest.mark.gpu

CFG = dj.IndexerConfig(index_topk=64, candidate_topk_blocks=32)
IMPLS = [None, ("ffi", "reference"), ("pallas", "ffi", "reference"), "reference"]


def gpu_mesh() -> Mesh:
    devices = jax.devices("gpu")
    if len(devices) < 2:
        pytest.skip(f"needs 2 or more NVIDIA GPUs on one host ({len(devices)} here)")
    return Mesh(np.array(devices), ("x",))


def inputs(rng, batch, pages=24, next_n=1):
    cache, bt = paged_cache(rng, batch, pages, 64, 128)
    q, q2 = query(rng, batch, next_n, 32, 128), query(rng, batch, next_n, 32, 128)
    lens = rng.integers(0, pages * 64 + 1, batch).astype(np.int32)
    lens[:4] = [0, 9, 257, pages * 64]
    return q, q2, cache, jnp.asarray(lens), bt


def assert_tree_equal(got, want):
    jax.tree.map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), got, want
    )


@pytest.mark.parametrize("impl", IMPLS, ids=str)
@pytest.mark.parametrize("next_n", [1, 2])
def test_row_sharded_on_gpus_equals_one_gpu(rng, impl, next_n):
    mesh = gpu_mesh()
    cfg = dj.IndexerConfig(**{**vars(CFG), "next_n": next_n})
    batch = 4 * len(mesh.devices)
    q, q2, cache, ctx, bt = inputs(rng, batch, next_n=next_n)
    want_idx, want_table = jax.jit(lambda *a: dj.publish(*a, cfg, implementation=impl))(
        q, cache, ctx, bt
    )
    got_idx, got_table = sharding.publish_row_sharded(
        q, cache, ctx, bt, cfg, mesh=mesh, axis="x", implementation=impl
    )
    assert_tree_equal((got_idx, got_table), (want_idx, want_table))
    for path in ("mask", "auto"):
        want = jax.jit(lambda *a, p=path: dj.select(*a, cfg, path=p, implementation=impl))(
            q2, cache, ctx, bt, want_table
        )
        got = sharding.select_row_sharded(
            q2,
            cache,
            ctx,
            bt,
            want_table,
            cfg,
            mesh=mesh,
            axis="x",
            path=path,
            implementation=impl,
        )
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=path)


def dcp_split(cache, bt, lens_capacity_pages, w):
    """Per-device caches holding global positions g with g % w == d (interleave 1)."""
    data = np.asarray(cache.data)
    bt = np.asarray(bt)
    batch, pages = bt.shape
    caches, tables = [], []
    local_pages = -(-pages // w)
    for d in range(w):
        new = np.zeros((batch * local_pages, 64, 1, 132), np.uint8)
        for b in range(batch):
            for j in range(local_pages * 64):
                g = j * w + d
                if g >= pages * 64:
                    continue
                src_page, src_off = bt[b, g // 64], g % 64
                dst_page, dst_off = b * local_pages + j // 64, j % 64
                vals = data[src_page].reshape(-1)
                dst = new[dst_page].reshape(-1)
                dst[dst_off * 128 : dst_off * 128 + 128] = vals[src_off * 128 : src_off * 128 + 128]
                dst[8192 + dst_off * 4 : 8192 + dst_off * 4 + 4] = vals[
                    8192 + src_off * 4 : 8192 + src_off * 4 + 4
                ]
        caches.append(new)
        tables.append(np.arange(batch * local_pages, dtype=np.int32).reshape(batch, local_pages))
    return np.stack(caches), np.stack(tables)


@pytest.mark.parametrize("impl", IMPLS, ids=str)
@pytest.mark.parametrize("exchange", ["topc", "pmax"])
def test_dcp_on_gpus_equals_one_gpu(rng, impl, exchange):
    mesh = gpu_mesh()
    w = len(mesh.devices)
    q, q2, cache, ctx, bt = inputs(rng, 6, pages=16)
    want_idx, want_table = jax.jit(lambda *a: dj.publish(*a, CFG, implementation=impl))(
        q, cache, ctx, bt
    )
    want_sel = jax.jit(lambda *a: dj.select(*a, CFG, path="mask", implementation=impl))(
        q2, cache, ctx, bt, want_table
    )
    caches, tables = dcp_split(cache, bt, 16, w)

    step = dcp_step(mesh, CFG, exchange=exchange, implementation=impl)
    got = step(q, jnp.asarray(caches), jnp.asarray(tables), ctx, q2)
    assert_dcp_equal(got, want_idx, want_table, want_sel)


@pytest.mark.parametrize("impl", [None, "ffi"])
def test_eager_shard_map_reaching_ffi_does_not_crash(rng, impl):
    """The library's FFI ops inside an un-jitted shard_map over every GPU (this crashed the
    process when a custom call had a zero-size operand): they run, and equal one GPU's answer."""
    mesh = gpu_mesh()
    s = jnp.asarray(rng.standard_normal((4, 4096)).astype(np.float32))
    lens = jnp.array([0, 100, 4000, 4096], jnp.int32)
    blocks = jnp.asarray(np.sort(rng.choice(512, (4, 32)), axis=1).astype(np.int32))

    def body(s, n, blocks):
        return (
            dj.topk(s, n, 64, implementation=impl),
            dj.topk(s, n, 64, candidates=blocks, implementation=impl),
            dj.select_candidate_blocks(s[:, :512], n, num_candidates=32, implementation=impl),
        )

    f = jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False)
    got = f(s, lens, blocks)
    want = (
        dj.topk(s, lens, 64, implementation="reference"),
        dj.topk(s, lens, 64, candidates=blocks, implementation="reference"),
        dj.select_candidate_blocks(s[:, :512], lens, num_candidates=32, implementation="reference"),
    )
    assert_tree_equal(got, want)
