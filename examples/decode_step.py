"""One DeepSeek-V4.1-shaped indexer decode step on synthetic data.

The candidate source layer publishes its table, four consumer layers select inside it, and each
consumer's selection is compared with what a dense top-k over its own logits would pick. Kernels
are used when a GPU and the extension are present (implementation=None), the reference otherwise.

    python examples/decode_step.py [--batch 4] [--min-context 12000] [--max-context 70000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj

CONSUMERS = 4
LEGEND = """
What the columns say:
  source k    positions the source layer (20) selected for itself (k = {k}, fewer only for rows
              shorter than k).
  blocks      candidate blocks it published (C = {c}, fewer for short rows); the newest is always
              one of them.
  sparse len  positions inside those blocks (at most C·B = {cb}): all a consumer may read.
  Ln jacc     consumer layer n's selection vs a dense top-{k} over that layer's own logits, as
              |A ∩ B| / |A ∪ B|. Rows up to C·B = {cb} positions are exactly 1.000 (every block
              is a candidate). Below 1.0, the consumer's best positions outside the published
              blocks were not eligible: the two-level design trades that for reading {cb}
              positions instead of the whole context. How much of the dense top-k survives
              depends on how alike the layers' keys are (here: correlated synthetic data) and
              falls as the context grows past C·B.
"""


def synthetic_layers(rng, cfg, context_lens, num_layers):
    """Per layer: (queries, cache); the layers' keys and queries are correlated, as in a model."""
    pages_per_req = [-(-int(n) // cfg.page_size) for n in context_lens]
    max_pages, num_pages = max(pages_per_req), sum(pages_per_req)
    pool = rng.permutation(num_pages).astype(np.int32)  # pages scattered over the pool
    block_table = np.zeros((len(context_lens), max_pages), np.int32)
    start = 0
    for b, n in enumerate(pages_per_req):
        block_table[b, :n] = pool[start : start + n]
        start += n
    slots = jnp.arange(num_pages * cfg.page_size, dtype=jnp.int32)
    base_k = rng.standard_normal((num_pages * cfg.page_size, cfg.head_dim), np.float32)
    base_q = rng.standard_normal((len(context_lens), 1, cfg.num_heads, cfg.head_dim), np.float32)
    weights = rng.uniform(0.0, 1.0, (len(context_lens), 1, cfg.num_heads)).astype(np.float32)
    layers = []
    for _ in range(num_layers):
        k = base_k + 0.4 * rng.standard_normal(base_k.shape, np.float32)
        q = base_q + 0.4 * rng.standard_normal(base_q.shape, np.float32)
        cache = dj.PagedIndexCache.zeros(num_pages, cfg.page_size, cfg.head_dim, cfg.cache_format)
        cache = dj.write_cache(cache, jnp.asarray(k), slots)
        layers.append((dj.quantize_queries(jnp.asarray(q), jnp.asarray(weights)), cache))
    return layers, jnp.asarray(block_table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--min-context", type=int, default=12_000)
    ap.add_argument("--max-context", type=int, default=70_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    cfg = dj.IndexerConfig()  # V4.1 defaults: 32 heads, D 128, k 512, C 2048 blocks of 8, fp8
    rng = np.random.default_rng(args.seed)
    ctx = np.linspace(args.min_context, args.max_context, args.batch).astype(np.int32)
    print(f"[1/4] making {1 + CONSUMERS} layers of synthetic keys and queries (fp8 caches) ...")
    layers, block_table = synthetic_layers(rng, cfg, ctx, 1 + CONSUMERS)
    context_lens = jnp.asarray(ctx)
    print(
        f"backend: {jax.default_backend()}  batch: {args.batch}  contexts: {ctx.tolist()}  "
        f"config: k={cfg.index_topk} C={cfg.candidate_topk_blocks} B={cfg.candidate_block_size}"
    )

    def step_body(layers, context_lens, block_table):
        (q0, c0), consumers = layers[0], layers[1:]
        indices, table = dj.publish(q0, c0, context_lens, block_table, cfg)
        selected = [dj.select(q, c, context_lens, block_table, table, cfg) for q, c in consumers]
        return indices, table, selected

    step = jax.jit(step_body)

    @jax.jit
    def dense_topk(layers, context_lens, block_table):
        out = []
        for q, c in layers[1:]:
            logits = dj.paged_mqa_logits(q, c, context_lens, block_table)
            out.append(dj.topk(logits, context_lens, cfg.index_topk))
        return out

    print(implementations(step_body, layers, context_lens, block_table))
    print("[2/4] compiling and running the step: publish (layer 20) + 4 selects ...")
    t0 = time.perf_counter()
    indices, table, selected = jax.block_until_ready(step(layers, context_lens, block_table))
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(step(layers, context_lens, block_table))
        times.append(time.perf_counter() - t0)
    print("[3/4] a dense top-k over every consumer's own logits, for comparison ...")
    dense = dense_topk(layers, context_lens, block_table)
    jaccard = [np.asarray(dj.selection_overlap(s, d)[0]) for s, d in zip(selected, dense)]
    print("[4/4] results\n")

    count, valid = np.asarray(table.count), np.asarray(table.valid_lens)
    header = f"{'row':>3} {'context':>8} {'source k':>8} {'blocks':>6} {'sparse len':>10}"
    header += "".join(f" {'L' + str(i + 1) + ' jacc':>8}" for i in range(CONSUMERS))
    print(header)
    for r in range(args.batch):
        line = f"{r:>3} {int(ctx[r]):>8} {int((np.asarray(indices[r]) >= 0).sum()):>8} "
        line += f"{int(count[r]):>6} {int(valid[r]):>10}"
        line += "".join(f" {j[r]:>8.3f}" for j in jaccard)
        print(line)
    print(LEGEND.format(k=cfg.index_topk, cb=cfg.candidate_positions, c=cfg.candidate_topk_blocks))
    print(
        f"step (publish + {CONSUMERS} selects): first call {compile_s:.1f} s incl. compile, "
        f"then median {statistics.median(times) * 1e3:.1f} ms wall per step on "
        f"{jax.default_backend()} (device-time numbers: see BENCHMARKS.md)"
    )


def implementations(fn, *args) -> str:
    """Which implementation each op of `fn(*args)` takes here (`dsv41_jax.info.explain`, traced
    before the first call), and why the faster ones were declined."""
    built = dj.info.device()["extension"]
    lines = [f"CUDA extension: {built}; the step's ops take:"]
    for choice in dict.fromkeys(
        (c.op, c.implementation, c.declined[0][1] if c.declined else "")
        for c in dj.info.explain(fn, *args)
    ):
        op, impl, why = choice
        lines.append(f"  {op}: {impl}" + (f" ({why})" if why else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
