"""The indexer where a model calls it: a DeepSeek-V4.1-shaped decode step in one jit.

Each model layer runs a stand-in block (it reads `block_mb` of bf16 weights, as a decode
step's attention and MoE do). At the indexer layers (20 the candidate source, 24/28/32/36 its
consumers) the step also projects the hidden state to index queries, head weights and an index
key, writes the key into the layer's paged index cache, selects with
`TwoLevelIndexer.decode_layer` and gathers the selected KV slots back into the hidden state (a
sparse-attention stand-in). Layer 24's queries come from layer 23's output, so the indexer runs
one layer at a time, between the model's own kernels. The caches are donated and the lengths
advance by `next_n` every step.

Copy `decode_step` into a model: the four lines marked "indexer" are all it takes.

    python examples/model_step.py [--batch 2] [--context 4096] [--steps 4] [--next-n 1]

It runs a few steps (the reference path on CPU, the kernels on a GPU) and checks every indexer
layer's selection of the last step against the reference run on the same queries and caches.
`python -m benchmarks model` times the same step on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj

SOURCE, CONSUMERS = 20, (24, 28, 32, 36)


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The stand-in model: its layers, hidden size, the bf16 weight bytes each layer's block
    reads (48 MB: about a V4.1 layer's share of a decode step; 1 MB: a light model whose
    step the host's dispatch bounds) and the width of the KV entries sparse attention reads."""

    layers: tuple[int, ...] = tuple(range(20, 37))
    hidden: int = 7168
    block_mb: float = 48.0
    kv_dim: int = 512


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ModelState:
    """What a decode step carries to the next: the hidden state `[batch, next_n, hidden]`, the
    indexer layers' caches (donated) and the request lengths."""

    hidden: jax.Array
    caches: dict[int, dj.PagedIndexCache]
    context_lens: jax.Array


def init_params(key: jax.Array, shape: ModelShape, cfg: dj.IndexerConfig) -> dict[str, jax.Array]:
    """Random bf16 weights: a block per model layer; index query, head-weight, key and output
    projections per indexer layer."""
    h, cols = shape.hidden, max(1, int(shape.block_mb * 2**20) // (2 * shape.hidden * 2))
    keys = iter(jax.random.split(key, 2 * len(shape.layers) + 4 * (1 + len(CONSUMERS))))

    def normal(*dims: int, scale: float) -> jax.Array:
        return (jax.random.normal(next(keys), dims, jnp.float32) * scale).astype(jnp.bfloat16)

    p = {}
    for layer in shape.layers:
        p[f"a{layer}"] = normal(h, cols, scale=h**-0.5)
        p[f"b{layer}"] = normal(cols, h, scale=cols**-0.5)
    for layer in (SOURCE, *CONSUMERS):
        p[f"q{layer}"] = normal(h, cfg.num_heads * cfg.head_dim, scale=h**-0.5)
        p[f"w{layer}"] = normal(h, cfg.num_heads, scale=h**-0.5)
        p[f"k{layer}"] = normal(h, cfg.head_dim, scale=h**-0.5)
        p[f"o{layer}"] = normal(shape.kv_dim, h, scale=0.1 * shape.kv_dim**-0.5)
    return p


def decode_step(
    ix: dj.TwoLevelIndexer,
    params: dict[str, jax.Array],
    state: ModelState,
    kv: jax.Array,
    block_table: jax.Array,
    *,
    fixed_selection: bool = False,
    inspect: bool = False,
) -> tuple[ModelState, Any]:
    """One decode step of every model layer. `kv`: `[slots, kv_dim]` bf16, the KV entries the
    sparse attention reads, one a cache slot. `fixed_selection`: every layer reads the same
    positions instead of the indexer's (the model without the indexer's kernels, everything
    else kept: the queries are still made and read, the keys still written). `inspect`: also
    return each indexer layer's queries and selection (for checks)."""
    cfg = ix.config
    batch, next_n, hidden = state.hidden.shape
    page = cfg.page_size
    # This step's keys go to positions L .. L + next_n - 1; then every row sees its own.
    pos = state.context_lens[:, None] + jnp.arange(next_n, dtype=jnp.int32)
    slots = dj.logical_to_physical(pos, block_table, page)  # -1 past the page table: skipped
    lens = state.context_lens + next_n
    row_table = dj.row_block_table(block_table, next_n)
    indexer = ix.begin_decode(lens, block_table)  # indexer: once a step
    h, caches, seen = state.hidden, dict(state.caches), {}
    for layer in sorted(int(name[1:]) for name in params if name[0] == "a"):
        h = h + ((h @ params[f"a{layer}"]) @ params[f"b{layer}"])  # the layer's stand-in block
        if layer not in caches:
            continue
        x = h.reshape(batch * next_n, hidden)
        q = (x @ params[f"q{layer}"]).astype(jnp.float32)
        weights = jax.nn.sigmoid((x @ params[f"w{layer}"]).astype(jnp.float32))
        query = dj.quantize_queries(  # indexer: the layer's index queries
            q.reshape(batch, next_n, cfg.num_heads, cfg.head_dim),
            weights.reshape(batch, next_n, cfg.num_heads),
        )
        key = (x @ params[f"k{layer}"]).astype(jnp.float32)
        caches[layer] = dj.write_cache(caches[layer], key, slots.reshape(-1))  # indexer
        if fixed_selection:
            # Reads the queries (so nothing that makes them is dropped) and the cache.
            values = query.values.reshape(batch * next_n, -1)[:, :1].astype(jnp.float32)
            touch = (values + query.weights.reshape(batch * next_n, -1)[:, :1]) > 0
            rows = jnp.repeat(lens, next_n)[:, None]
            first = jnp.arange(cfg.index_topk, dtype=jnp.int32)[None, :] + touch.astype(jnp.int32)
            selection = jnp.where(first < rows, first, -1)
        else:
            selection, indexer = ix.decode_layer(layer, query, caches[layer], indexer)  # indexer
        seen[layer] = (query, selection)
        slot = dj.logical_to_physical(selection, row_table, page)
        picked = jnp.take(kv, jnp.maximum(slot, 0), axis=0)  # [rows, k, kv_dim]
        picked = jnp.where((slot >= 0)[..., None], picked, 0).astype(jnp.float32)
        attended = picked.mean(axis=1) @ params[f"o{layer}"].astype(jnp.float32)
        h = h + attended.reshape(batch, next_n, hidden).astype(h.dtype)
    out = ModelState(h, caches, lens)
    return out, (seen if inspect else None)


def init_state(
    rng: np.random.Generator,
    cfg: dj.IndexerConfig,
    shape: ModelShape,
    batch: int,
    context: int,
    steps: int,
) -> tuple[ModelState, jax.Array, jax.Array]:
    """(state, kv, block_table): every request's page table holds `context` positions, its
    pages scattered over the pool; the requests start `steps · next_n` positions short of it,
    so `steps` steps fill it; random keys already in the caches."""
    pages = -(-context // cfg.page_size)
    table = rng.permutation(batch * pages).astype(np.int32).reshape(batch, pages)
    slots = batch * pages * cfg.page_size
    key = jax.random.key(int(rng.integers(1 << 30)))

    @jax.jit
    def filled(k: jax.Array) -> dj.PagedIndexCache:
        empty = dj.PagedIndexCache.zeros(batch * pages, cfg.page_size, cfg.head_dim)
        keys = jax.random.normal(k, (slots, cfg.head_dim), jnp.float32)
        return dj.write_cache(empty, keys, jnp.arange(slots, dtype=jnp.int32))

    layers = (SOURCE, *CONSUMERS)
    caches = {layer: filled(k) for layer, k in zip(layers, jax.random.split(key, len(layers)))}
    h = jax.random.normal(key, (batch, cfg.next_n, shape.hidden), jnp.bfloat16)
    kv = jax.random.normal(key, (slots, shape.kv_dim), jnp.bfloat16)
    if steps * cfg.next_n > context:
        raise ValueError(f"{steps} steps of {cfg.next_n} keys do not fit {context} positions")
    lens = jnp.full((batch,), context - steps * cfg.next_n, jnp.int32)
    return ModelState(h, caches, lens), kv, jnp.asarray(table)


def check_last_step(ix: dj.TwoLevelIndexer, seen: dict, state: ModelState, bt: jax.Array) -> None:
    """Every indexer layer's selection equals the reference's on the same queries and caches
    (the caches after the step: each layer's own key was written before it selected)."""
    ref = dataclasses.replace(ix, implementation=("reference",))
    queries = {layer: q for layer, (q, _) in seen.items()}
    want = ref.decode(queries, state.caches, state.context_lens, bt).selections
    for layer, (_, got) in seen.items():
        if not np.array_equal(np.asarray(got), np.asarray(want[layer])):
            raise SystemExit(f"layer {layer}: the selection differs from the reference's")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=4, help="at least 2")
    ap.add_argument("--next-n", type=int, default=1, choices=(1, 2))
    ap.add_argument("--block-mb", type=float, default=None, help="default: 48 on a GPU, 1 on CPU")
    args = ap.parse_args()

    gpu = jax.default_backend() == "gpu"
    cfg = dj.IndexerConfig(next_n=args.next_n)
    block_mb = args.block_mb if args.block_mb is not None else (48.0 if gpu else 1.0)
    shape = ModelShape(hidden=7168 if gpu else 512, block_mb=block_mb)
    ix = dj.make_two_level_indexer(cfg, source_layer=SOURCE, consumer_layers=CONSUMERS)
    rng = np.random.default_rng(0)
    state, kv, bt = init_state(rng, cfg, shape, args.batch, args.context, args.steps)
    params = init_params(jax.random.key(1), shape, cfg)
    step = jax.jit(
        decode_step, static_argnames=("fixed_selection", "inspect"), donate_argnames=("state",)
    )
    print(
        f"backend {jax.default_backend()}: {len(shape.layers)} model layers, indexer layers "
        f"{ix.layers}, batch {args.batch}, context {args.context}, next_n {args.next_n}"
    )
    times = []
    for _ in range(args.steps - 1):
        t0 = time.perf_counter()
        state, _ = step(ix, params, state, kv, bt)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - t0)
    state, seen = step(ix, params, state, kv, bt, inspect=True)  # the last, with its selections
    check_last_step(ix, seen, state, bt)
    print(
        f"{args.steps} steps, lengths now {np.asarray(state.context_lens).tolist()}; the last "
        f"step's {len(seen)} indexer layers select exactly as the reference"
        + (
            f"; wall per step after the first {np.median(times[1:]) * 1e3:.1f} ms"
            if times[1:]
            else ""
        )
        + " (device time: python -m benchmarks model)"
    )


if __name__ == "__main__":
    main()
