"""Row sharding and DCP over every visible GPU (`python -m benchmarks sharded`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import inputs
from benchmarks.table import Row
from benchmarks.timing import Timer


def bench_sharded(timer: Timer, rng, bw) -> list[Row]:
    """Row sharding and DCP over every visible GPU at bs 64 × {128K, 1M}: the busiest GPU's
    device time per publish + select, and the collectives alone."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import dsv41_jax as dj
    from dsv41_jax import sharding

    devices = jax.devices()
    w = len(devices)
    if w < 2:
        return []
    mesh = Mesh(np.array(devices), ("x",))
    cfg = dj.IndexerConfig()
    rows = []
    for bs, ctx in ((64, 131072), (64, 1 << 20)):
        shape = f"bs{bs} x {ctx // 1024}K, {w} GPUs"
        # Row sharding: replicated cache, each GPU scores bs / W requests.
        caches, qs, lens, bt = inputs.decode_inputs(
            rng, jax.random.key(ctx), bs, ctx, layers=2, sharding=NamedSharding(mesh, P())
        )

        def row_step(q0, q1, c0, c1, lens, bt):
            top, table = sharding.publish_row_sharded(q0, c0, lens, bt, cfg, mesh=mesh, axis="x")
            sel = sharding.select_row_sharded(q1, c1, lens, bt, table, cfg, mesh=mesh, axis="x")
            return top, table, sel

        def one_gpu_step(q0, q1, c0, c1, lens, bt):
            top, table = dj.publish(q0, c0, lens, bt, cfg)
            return top, table, dj.select(q1, c1, lens, bt, table, cfg)

        args = [(qs[0], qs[1], caches[0], caches[1], lens, bt)]
        floor = (bs * ctx * 132 / w + bs * cfg.candidate_positions * 132 / w) / (bw * 1e3)
        t = timer.jax_us(
            row_step,
            args,
            # Checked against one GPU's publish + select: each row's kernels are the same.
            want=jax.jit(one_gpu_step)(*args[0]),
            what=f"row-sharded {shape}",
        )
        rows.append(Row("row-sharded publish + select", shape, "auto path", t, floor))
        del caches
        # DCP: each GPU holds ctx / W positions of every request (interleave 1); the publishing
        # and the consuming layer have their own queries and caches (identical operands would
        # let XLA compute the logits once).
        local_ctx = ctx // w
        caches, qs, lens_local, bt = inputs.decode_inputs(
            rng, jax.random.key(ctx + 1), bs * w, local_ctx, layers=2
        )
        stacked = [
            jax.device_put(c.data.reshape(w, -1, 64, 1, 132), NamedSharding(mesh, P("x")))
            for c in caches
        ]
        # Each device's page table is a permutation of its own pages.
        local_pages = bs * local_ctx // 64
        tables = jax.device_put(
            jnp.asarray(
                np.stack([rng.permutation(local_pages) for _ in range(w)])
                .astype(np.int32)
                .reshape(w, bs, -1)
            ),
            NamedSharding(mesh, P("x")),
        )
        glens = jnp.full((bs,), ctx, jnp.int32)
        q0, q1 = (jax.tree.map(lambda x: x[:bs], q) for q in qs)
        # Both exchanges are exact: the second is checked against the first's selections.
        want = None
        for exchange in ("topc", "pmax"):

            @functools.partial(
                jax.shard_map,
                mesh=mesh,
                in_specs=(P(), P(), P("x"), P("x"), P("x"), P()),
                out_specs=P(),
                check_vma=False,
            )
            def dcp_step(q0, q1, c0, c1, tables, glens, exchange=exchange):
                local0, local1 = dj.PagedIndexCache(c0[0]), dj.PagedIndexCache(c1[0])
                top, table = sharding.dcp_publish(
                    q0, local0, tables[0], glens, cfg, axis="x", exchange=exchange
                )
                sel = sharding.dcp_select(q1, local1, tables[0], glens, table, cfg, axis="x")
                return top, table.blocks, sel

            floor = 2 * bs * local_ctx * 132 / (bw * 1e3)
            dcp_args = [(q0, q1, *stacked, tables, glens)]
            t = timer.jax_us(dcp_step, dcp_args, want=want, what=f"DCP {shape} {exchange}")
            if want is None:
                want = jax.jit(dcp_step)(*dcp_args[0])
            rows.append(Row("DCP publish + select", shape, f"exchange={exchange}", t, floor))
        # The collectives alone: the pmax of every block maximum vs the top-C all-gather.
        nb = ctx // 8
        blockmax = jax.device_put(jnp.zeros((w * bs, nb), jnp.float32), NamedSharding(mesh, P("x")))
        pairs = jax.device_put(
            jnp.zeros((w * bs, 2 * 2048), jnp.int32), NamedSharding(mesh, P("x"))
        )
        for name, fn, arg in (
            ("pmax block maxima", lambda x: jax.lax.pmax(x, "x"), blockmax),
            (
                "all-gather top-C pairs",
                lambda x: jax.lax.all_gather(x, "x", axis=1, tiled=True),
                pairs,
            ),
        ):
            f = jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
            rows.append(Row(f"collective: {name}", shape, "nccl", timer.jax_us(f, [(arg,)]), 0.0))
        del caches, stacked
    return rows
