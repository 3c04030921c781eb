"""Small calls of every FFI handler, run under compute-sanitizer by scripts/device_check.sh."""

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj

rng = np.random.default_rng(0)
pages, batch = 40, 3
cache = dj.write_cache(
    dj.PagedIndexCache.zeros(batch * pages, 64, 128),
    jnp.asarray(rng.standard_normal((batch * pages * 64, 128)), jnp.float32),
    jnp.arange(batch * pages * 64, dtype=jnp.int32),
)
bt = (
    jnp.asarray(rng.permutation(batch * pages).reshape(batch, pages).astype(np.int32))
    .at[1, 3]
    .set(-1)
)
q = dj.quantize_queries(
    jnp.asarray(rng.standard_normal((batch, 2, 32, 128)), jnp.float32),
    jnp.ones((batch, 2, 32), jnp.float32),
)
lens = jnp.array([0, 1000, pages * 64 + 999], jnp.int32)  # the last is past the page table
# Under jit the lengths are not visible at trace time: the FFI path must clamp them itself.
logits = jax.jit(lambda *a: dj.paged_mqa_logits(*a, implementation="ffi"))(q, cache, lens, bt)
rows = dj.row_lengths(jnp.minimum(lens, pages * 64), 2)
sel = jnp.asarray(rng.integers(-3, 400, (6, 64)).astype(np.int32))
table = dj.sort_candidate_blocks(sel, rows, dj.row_block_table(bt, 2), implementation="ffi")
phys = dj.logical_to_physical(
    jnp.asarray(rng.integers(-1, 3000, (6, 32)).astype(np.int32)),
    dj.row_block_table(bt, 2),
    64,
    implementation="ffi",
)
scores = jnp.asarray(rng.standard_normal((3, 70000)).astype(np.float32))
top_lens = jnp.array([0, 700, 70000], jnp.int32)
members = jnp.asarray(rng.integers(-1, 9000, (3, 64)).astype(np.int32))
top = dj.topk(scores, top_lens, 512, implementation="ffi")
top_masked = dj.topk(scores, top_lens, 512, candidates=members, implementation="ffi")
picked = dj.select_candidate_blocks(
    scores[:, :16384], top_lens, num_candidates=2048, implementation="ffi"
)
# The Hopper sparse path: gather (with a page id past the cache and -1 padding) + dense kernel.
bad_bt = dj.row_block_table(bt, 2).at[0, 0].set(batch * pages + 50)
sparse_table = dj.sort_candidate_blocks(
    jnp.asarray(rng.integers(-3, 400, (6, 32)).astype(np.int32)),
    rows,
    bad_bt,
    implementation="ffi",
)
sparse = dj.sparse_paged_mqa_logits(
    q, cache, sparse_table, jnp.minimum(lens, pages * 64), bt, block_size=8, implementation="ffi"
)
amax = dj.block_amax(jnp.where(jnp.isnan(logits), 0.0, logits), rows, implementation="pallas")
print(
    "sanitize run done",
    float(jnp.nansum(jnp.where(jnp.isfinite(logits), logits, 0))),
    int(table.count.sum()),
    int(phys.sum()),
    int(top.sum() + top_masked.sum() + picked.sum()),
    float(jnp.where(jnp.isfinite(amax), amax, 0).sum()),
    float(jnp.nansum(sparse[:, :8])),
)
