"""Print a digest of one jitted decode step (publish + a sparse and a mask select) on fixed
inputs. tests/test_gpu_ffi.py runs it with and without XLA command buffers (CUDA graphs)."""

import hashlib

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj

rng = np.random.default_rng(7)
cfg = dj.IndexerConfig()
batch, pages = 4, 400
cache = dj.write_cache(
    dj.PagedIndexCache.zeros(batch * pages, 64, 128),
    jnp.asarray(rng.standard_normal((batch * pages * 64, 128)), jnp.float32),
    jnp.arange(batch * pages * 64, dtype=jnp.int32),
)
bt = jnp.asarray(rng.permutation(batch * pages).reshape(batch, pages).astype(np.int32))
q = dj.quantize_queries(
    jnp.asarray(rng.standard_normal((batch, 1, 32, 128)), jnp.float32),
    jnp.asarray(rng.uniform(size=(batch, 1, 32)), jnp.float32),
)
lens = jnp.array([900, 16384, 20000, pages * 64], jnp.int32)


@jax.jit
def step(q, cache, lens, bt):
    idx, table = dj.publish(q, cache, lens, bt, cfg)
    return idx, table, dj.select(q, cache, lens, bt, table, cfg)


out = jax.tree.leaves(step(q, cache, lens, bt))
for _ in range(3):  # replays: a captured graph runs again
    again = jax.tree.leaves(step(q, cache, lens, bt))
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(out, again))
print("digest", hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in out)).hexdigest())
