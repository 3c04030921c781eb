"""One consumer layer's select: the sparse path (and its forms forced) against the mask path."""

from __future__ import annotations

import jax

from benchmarks import inputs
from benchmarks.args import pick_shapes
from benchmarks.table import Row
from benchmarks.timing import Timer

SELECT_SHAPES = ((8, 131072), (64, 131072), (8, 1 << 20), (64, 1 << 20))


def bench_select(timer: Timer, rng, bw, quick: bool, shapes=None) -> list[Row]:
    """One consumer layer: the sparse path (sparse logits over C·B positions + top-k +
    map back) against the mask path (dense logits + masked top-k); floor = the candidate blocks'
    bytes (C·B tokens × 132 B per row) over the copy bandwidth."""
    import torch

    import dsv41_jax as dj

    cfg = dj.IndexerConfig()
    rows = []
    for bs, ctx in pick_shapes(shapes, quick, SELECT_SHAPES[:2], SELECT_SHAPES):
        caches, qs, lens, bt = inputs.decode_inputs(
            rng, jax.random.key(bs + ctx), bs, ctx, layers=2
        )
        _, table = jax.jit(lambda q, c, n, b: dj.publish(q, c, n, b, cfg))(
            qs[0], caches[0], lens, bt
        )
        shape = f"bs{bs} x {ctx // 1024}K"
        t = timer.jax_us(
            lambda q, c, n, b: dj.publish(q, c, n, b, cfg),
            [(qs[0], caches[0], lens, bt), (qs[1], caches[1], lens, bt)],
        )
        rows.append(Row("publish (layer 20)", shape, "default", t, bs * ctx * 132 / (bw * 1e3)))
        floor = bs * cfg.candidate_positions * 132 / (bw * 1e3)
        sets = [(qs[1], caches[1], lens, bt, table), (qs[0], caches[0], lens, bt, table)]
        # The sparse path as the policy runs it (default), then each of its two forms forced:
        # one kernel ("onchip"), and its logits then the short select ("short").
        # Each is checked against the mask path's selection (the paths are bitwise equal).
        want = jax.jit(lambda *a: dj.select(*a, cfg, path="mask"))(*sets[0])
        for path, algorithm in (
            ("sparse", None),
            ("sparse", "onchip"),
            ("sparse", "short"),
            ("mask", None),
        ):
            t = timer.jax_us(
                lambda *a, p=path, f=algorithm: dj.select(*a, cfg, path=p, topk_algorithm=f),
                sets,
                want=want,
                what=f"select {shape} {path} {algorithm}",
            )
            name = f"{path} path" + (f", {algorithm} top-k forced" if algorithm else "")
            rows.append(Row("select (consumer layer)", shape, name, t, floor))
        # torch: the mask path's selection part on the same dense logits (DeepGEMM logits are
        # not callable from this torch); add the logits row below to compare whole layers.
        logits = jax.jit(lambda q, c, n, b: dj.paged_mqa_logits(q, c, n, b))(
            qs[1], caches[1], lens, bt
        )
        t = timer.jax_us(lambda *a: dj.paged_mqa_logits(*a), [s[:4] for s in sets])
        rows.append(Row("select (consumer layer)", shape, "dense logits alone (ffi)", t, floor))
        tl = torch.from_dlpack(logits)
        member = torch.zeros((bs, ctx // 8), dtype=torch.bool, device="cuda")
        tb = torch.from_dlpack(table.blocks)
        member.scatter_(1, torch.where(tb < ctx // 8, tb, 0).long(), True)
        mask = member.repeat_interleave(8, dim=1)
        t = timer.kernel_us(
            lambda i, tl=tl, mask=mask: (
                torch.topk(tl.masked_fill(~mask, float("-inf")), 512, dim=1).indices
            )
        )
        rows.append(Row("select (consumer layer)", shape, "torch mask + topk (baseline)", t, floor))
        del caches, logits, tl, mask
    return rows
