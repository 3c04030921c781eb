"""Run the V4.1 indexer step (`make_two_level_indexer`: publish + 4 consumers) on fixed inputs and
print, per batch size, a digest of the results and how many command-buffer computations XLA put
in the compiled step. The step runs first at batch 4, then at batch 8 (a capture at a larger
batch than the warm-up), and replays each. tests/test_gpu_step.py runs it with XLA command
buffers (CUDA graphs) off and on.

    python scripts/decode_step_digest.py [--path auto|mask|sparse]
"""

import argparse
import hashlib
import json
import tempfile

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
step = jax.jit(lambda *a: indexer.decode(*a, physical=True))


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
    hlo = step.lower(*a).compile().as_text()
    out = jax.tree.leaves(step(*a))
    for _ in range(3):  # replays: a captured graph runs again
        again = jax.tree.leaves(step(*a))
        assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(out, again))
    digest = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in out)).hexdigest()
    print(f"batch {batch} command_buffer computations {hlo.count('command_buffer')}")
    # Proof from the device side: CUDA graph launches and kernels run as graph nodes, read from
    # CUPTI through torch.profiler (records every library's CUDA work in the process).
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        jax.block_until_ready(step(*a))
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    launches = sum("GraphLaunch" in e.get("name", "") for e in events)
    nodes = sum(
        e.get("cat") == "kernel" and int(e.get("args", {}).get("graph node id", 0) or 0) > 0
        for e in events
    )
    kernels = sum(e.get("cat") == "kernel" for e in events)
    print(f"batch {batch} graph launches {launches} graph kernels {nodes} of {kernels}")
    print(f"batch {batch} digest {digest}")
