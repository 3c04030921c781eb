"""Run the V4.1 indexer step (`make_two_level_indexer`: publish + 4 consumers) on fixed inputs and
print, per batch size, a digest of the results. The step runs first at batch 4, then at batch 8
(a capture at a larger batch than the warm-up), and replays each. Around each batch's runs it
writes `== batch N start` / `== batch N end` to stderr, so that XLA's own log lines in between
(TF_CPP_VMODULE=command_buffer_thunk=3) show whether the step ran as command buffers (CUDA
graphs); the jitted step's XLA module is `jit_indexer_step`. tests/test_gpu_step.py runs it with
command buffers off, at XLA's defaults, and forced on.

    python scripts/decode_step_digest.py [--path auto|mask|sparse]
"""

import argparse
import hashlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj

ap = argparse.ArgumentParser()
ap.add_argument("--path", default="auto")
ap.add_argument("--pages", type=int, default=400, help="pages of 64 positions per request")
args = ap.parse_args()
cfg = dj.IndexerConfig()
indexer = dj.make_two_level_indexer(
    cfg, source_layer=20, consumer_layers=(24, 28, 32, 36), path=args.path
)


def indexer_step(*a):
    return indexer.decode(*a, physical=True)


step = jax.jit(indexer_step)


def inputs(batch, pages, seed):
    rng = np.random.default_rng(seed)
    bt = jnp.asarray(rng.permutation(batch * pages).reshape(batch, pages).astype(np.int32))
    lens = jnp.asarray(rng.integers(1, pages * 64 + 1, batch).astype(np.int32)).at[0].set(900)
    queries, caches = {}, {}
    for layer in indexer.layers:
        keys = rng.standard_normal((batch * pages * 64, 128)).astype(np.float32)
        caches[layer] = dj.write_cache(
            dj.PagedIndexCache.zeros(batch * pages, 64, 128),
            jnp.asarray(keys),
            jnp.arange(batch * pages * 64, dtype=jnp.int32),
        )
        queries[layer] = dj.quantize_queries(
            jnp.asarray(rng.standard_normal((batch, 1, 32, 128)), jnp.float32),
            jnp.asarray(rng.uniform(size=(batch, 1, 32)), jnp.float32),
        )
    return queries, caches, lens, bt


for batch in (4, 8):
    a = inputs(batch, args.pages, batch)
    step.lower(*a).compile()
    print(f"== batch {batch} start", file=sys.stderr, flush=True)
    out = jax.tree.leaves(step(*a))
    for _ in range(3):  # replays: a captured graph runs again
        again = jax.tree.leaves(step(*a))
        assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(out, again))
    print(f"== batch {batch} end", file=sys.stderr, flush=True)
    digest = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in out)).hexdigest()
    print(f"batch {batch} digest {digest}")
