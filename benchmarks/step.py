"""The whole decode indexer step in one jit, its paths and CUDA selects, beside XLA and torch
compositions, and its per-layer split."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp

from benchmarks import inputs
from benchmarks.args import fits_device, pick_shapes
from benchmarks.table import Row
from benchmarks.timing import Timer

STEP_SHAPES = tuple((bs, ctx) for bs in (1, 8, 64) for ctx in (16384, 131072, 1 << 20))


def _lax_step(cfg, qs, caches, lens, bt):
    """The same step composed from XLA ops: FFI logits, then jnp block maxima and lax.top_k for
    every selection (the baseline a JAX user without this library's selection kernels writes)."""
    import dsv41_jax as dj

    b, k, c = cfg.candidate_block_size, cfg.index_topk, cfg.candidate_topk_blocks
    logits = dj.paged_mqa_logits(qs[0], caches[0], lens, bt)
    n = logits.shape[1]
    pos = jnp.arange(n)[None]
    vis = pos < lens[:, None]
    masked = jnp.where(vis & ~jnp.isnan(logits), logits, -jnp.inf)
    top = jax.lax.top_k(masked, k)[1]
    nb = n // b
    amax = masked.reshape(-1, nb, b).max(axis=2)
    newest = (lens + b - 1) // b - 1
    amax = jnp.where(jnp.arange(nb)[None] == newest[:, None], jnp.inf, amax)
    blocks = jnp.sort(jax.lax.top_k(amax, c)[1], axis=1)
    member = (
        jnp.zeros((logits.shape[0], nb), bool)
        .at[jnp.arange(logits.shape[0])[:, None], blocks]
        .set(True)
    )
    sel = []
    for q, cache in zip(qs[1:], caches[1:]):
        lg = dj.paged_mqa_logits(q, cache, lens, bt)
        ok = vis & ~jnp.isnan(lg) & jnp.repeat(member, b, axis=1)
        sel.append(jnp.sort(jax.lax.top_k(jnp.where(ok, lg, -jnp.inf), k)[1], axis=1))
    return top, blocks, sel


def _torch_step_selection(tls, lens_t, cfg):
    """The step's selection in torch ops on the five layers' logits (the composition a PyTorch
    stack writes around DeepGEMM's logits): masked top-k of the source, block maxima with the
    newest block pinned, top-C blocks, and each consumer's top-k inside them."""
    import torch

    b, k, c = cfg.candidate_block_size, cfg.index_topk, cfg.candidate_topk_blocks
    rows, n = tls[0].shape
    vis = torch.arange(n, device=tls[0].device)[None] < lens_t[:, None]
    masked = tls[0].masked_fill(~vis | tls[0].isnan(), float("-inf"))
    top = torch.topk(masked, k, dim=1).indices.sort(dim=1).values
    amax = masked.view(rows, n // b, b).amax(dim=2)
    amax.scatter_(1, ((lens_t + b - 1) // b - 1).clamp(min=0)[:, None].long(), float("inf"))
    blocks = torch.topk(amax, c, dim=1).indices.sort(dim=1).values
    member = torch.zeros_like(amax, dtype=torch.bool).scatter_(1, blocks, True)
    ok = vis & member.repeat_interleave(b, dim=1)
    sels = [
        torch.topk(t.masked_fill(~ok | t.isnan(), float("-inf")), k, dim=1).indices.sort(dim=1)
        for t in tls[1:]
    ]
    return [top, blocks, *[x.values for x in sels]]


# The step's implementation column: the path, and which CUDA select the public top-k used
# (None: the dispatch's pick; otherwise that select forced wherever it takes the call).
STEP_ALGORITHMS = (None, "filter", "cluster")


def _step_impl(path: str, algorithm: str | None) -> str:
    """ "auto path (default)": sparse where the GPU has a sparse kernel, the dense top-k where
    every block is a candidate and the step has fewer than 8 query rows."""
    name = "auto path (default)" if path == "auto" else f"{path} path"
    return name + (f", {algorithm} top-k forced" if algorithm else "")


def bench_step(timer: Timer, rng, bw, quick: bool, shapes=None) -> list[Row]:
    """The whole V4.1 decode indexer step in one jit (`make_two_level_indexer`: publish at layer
    20 + 4 consumers, each layer with its own cache), sparse and mask paths, beside an XLA
    composition with lax.top_k; plus the publish and one select alone (the per-layer split).
    Floor = the source layer's whole cache + 4 consumers' candidate blocks. The sparse and mask
    paths are also timed with the filter-first and the cluster radix select forced."""
    import dsv41_jax as dj

    cfg = dj.IndexerConfig()
    layers = (20, 24, 28, 32, 36)
    rows = []
    quick_set = ((1, 16384), (8, 131072), (64, 131072))
    for bs, ctx in pick_shapes(shapes, quick, quick_set, STEP_SHAPES):
        # The layers' caches (132 bytes a position), and as much again for those the step returns.
        if not fits_device(f"step bs{bs} x {ctx // 1024}K", 2 * len(layers) * bs * ctx * 132):
            continue
        caches, qs, lens, bt = inputs.decode_inputs(
            rng, jax.random.key(7 + bs + ctx), bs, ctx, layers=5
        )
        floor = (bs * ctx * 132 + 4 * bs * cfg.candidate_positions * 132) / (bw * 1e3)
        shape = f"bs{bs} x {ctx // 1024}K"
        qd, cd = dict(zip(layers, qs)), dict(zip(layers, caches))
        qr = dict(zip(layers, qs[::-1]))
        sets = [(qd, cd, lens, bt), (qr, cd, lens, bt)]
        variants = [("auto", None), *itertools.product(("sparse", "mask"), STEP_ALGORITHMS)]
        # Each variant's selections are checked against the mask path's (all bitwise equal).
        mask_ix = dj.make_two_level_indexer(
            cfg, source_layer=20, consumer_layers=layers[1:], path="mask"
        )
        want = jax.jit(mask_ix.decode)(*sets[0]).selections
        for path, algorithm in variants:
            ix = dj.make_two_level_indexer(
                cfg,
                source_layer=20,
                consumer_layers=layers[1:],
                path=path,
                topk_algorithm=algorithm,
            )
            t = timer.jax_us(
                lambda *a, ix=ix: ix.decode(*a),
                sets,
                calls=10,
                want=want,
                what=f"step {shape} {path} {algorithm}",
                pick=lambda result: result.selections,
            )
            rows.append(
                Row(
                    "decode step (publish + 4 selects)",
                    shape,
                    _step_impl(path, algorithm),
                    t,
                    floor,
                )
            )
        t = timer.jax_us(
            lambda *a: _lax_step(cfg, *a),
            [(qs, caches, lens, bt), (qs[::-1], caches, lens, bt)],
            calls=5,
        )
        rows.append(
            Row("decode step (publish + 4 selects)", shape, "XLA + lax.top_k (baseline)", t, floor)
        )
        # torch: the same DeepGEMM logits (timed here through this library's FFI call, 5 layers)
        # plus the selection in torch ops.
        import torch

        t_logits = timer.jax_us(lambda *a: dj.paged_mqa_logits(*a), [(qs[0], caches[0], lens, bt)])
        tls = [
            torch.from_dlpack(jax.jit(dj.paged_mqa_logits)(q, c, lens, bt))
            for q, c in zip(qs, caches)
        ]
        lens_t = torch.from_dlpack(lens)
        t_sel = timer.kernel_us(lambda i, tls=tls: _torch_step_selection(tls, lens_t, cfg), calls=5)
        rows.append(
            Row(
                "decode step (publish + 4 selects)",
                shape,
                "DeepGEMM logits + torch selection (baseline)",
                5 * t_logits + t_sel,
                floor,
            )
        )
        _, table = jax.jit(lambda q, c, n, b: dj.publish(q, c, n, b, cfg))(
            qs[0], caches[0], lens, bt
        )
        # The layers' selections are checked against the reference top-k over the same (FFI,
        # deterministic) logits: the source's over every position, a consumer's in the table.
        k = cfg.index_topk
        source_logits = jax.jit(dj.paged_mqa_logits)(qs[0], caches[0], lens, bt)
        want_source = dj.topk(source_logits, lens, k, implementation="reference")
        consumer_logits = jax.jit(dj.paged_mqa_logits)(qs[1], caches[1], lens, bt)
        want_consumer = dj.topk(
            consumer_logits, lens, k, candidates=table, implementation="reference"
        )
        del source_logits, consumer_logits
        for algorithm in STEP_ALGORITHMS:
            label = "default" if algorithm is None else f"{algorithm} top-k forced"
            t = timer.jax_us(
                lambda q, c, n, b, f=algorithm: dj.publish(q, c, n, b, cfg, topk_algorithm=f),
                [(qs[0], caches[0], lens, bt)],
                want=want_source,
                what=f"publish {shape} {label}",
                pick=lambda result: result[0],
            )
            rows.append(Row("publish (layer 20)", shape, label, t, bs * ctx * 132 / (bw * 1e3)))
            for path in ("auto", "sparse", "mask") if algorithm is None else ("sparse", "mask"):
                t = timer.jax_us(
                    lambda *a, p=path, f=algorithm: dj.select(*a, cfg, path=p, topk_algorithm=f),
                    [(qs[1], caches[1], lens, bt, table), (qs[2], caches[2], lens, bt, table)],
                    want=want_consumer,
                    what=f"select {shape} {path} {algorithm}",
                )
                sel_floor = bs * cfg.candidate_positions * 132 / (bw * 1e3)
                rows.append(
                    Row(
                        "select (consumer layer)",
                        shape,
                        _step_impl(path, algorithm),
                        t,
                        sel_floor,
                    )
                )
        del caches, cd, qd
    return rows
