"""Small calls of every FFI handler (and the Pallas block amax), run under compute-sanitizer by
scripts/device_check.sh. One section per op, so a tool can be run on one op at a time:

    python scripts/sanitize_run.py [section ...]      # default: every section
"""

import sys

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
rows = dj.row_lengths(jnp.minimum(lens, pages * 64), 2)
scores = jnp.asarray(rng.standard_normal((3, 70000)).astype(np.float32))
top_lens = jnp.array([0, 700, 70000], jnp.int32)


def logits():
    # Under jit the lengths are not visible at trace time: the FFI path must clamp them itself.
    out = jax.jit(lambda *a: dj.paged_mqa_logits(*a, implementation="ffi"))(q, cache, lens, bt)
    return float(jnp.nansum(jnp.where(jnp.isfinite(out), out, 0)))


def sort():
    sel = jnp.asarray(rng.integers(-3, 400, (6, 64)).astype(np.int32))
    table = dj.sort_candidate_blocks(sel, rows, dj.row_block_table(bt, 2), implementation="ffi")
    return int(table.count.sum())


def physical():
    phys = dj.logical_to_physical(
        jnp.asarray(rng.integers(-1, 3000, (6, 32)).astype(np.int32)),
        dj.row_block_table(bt, 2),
        64,
        implementation="ffi",
    )
    return int(phys.sum())


def topk():
    members = jnp.asarray(rng.integers(-1, 9000, (3, 64)).astype(np.int32))
    top = dj.topk(scores, top_lens, 512, implementation="ffi")
    masked = dj.topk(scores, top_lens, 512, candidates=members, implementation="ffi")
    return int(top.sum() + masked.sum())


def forced(algorithm):
    """One CUDA select forced, split rows asked for ("filter": split rows, a row-bar shortfall's
    restream and its last-arriver merge, and rows in clusters with a sampled bar, cuts and the
    gather; "short": a row over a cluster of 8 CTAs), on bf16 rows, ragged starts, the
    candidate-block mode and a messy candidate mask."""
    from dsv41_jax.topk import ffi as topk_ffi

    long = jnp.asarray(rng.standard_normal((2, 1 << 17)).astype(np.float32))
    out = topk_ffi.cuda_topk(
        long, jnp.array([1 << 17, 5000]), 2048, None, None, 8, "positions", algorithm, True
    )
    half = topk_ffi.cuda_topk(
        scores.astype(jnp.bfloat16), top_lens, 512, None, None, 8, "positions", algorithm, True
    )
    starts = jnp.array([0, 3, 69999], jnp.int32)
    ragged = topk_ffi.cuda_topk(
        scores, jnp.array([5, 60000, 1]), 512, starts, None, 8, "positions", algorithm, True
    )
    blocks = topk_ffi.cuda_topk(
        scores[:, :16384], top_lens, 2048, None, None, 8, "candidate_blocks", algorithm, True
    )
    members = jnp.asarray(rng.integers(-1, 9000, (3, 64)).astype(np.int32))  # messy on purpose
    masked = topk_ffi.cuda_topk(
        scores, top_lens, 512, None, members, 8, "positions", algorithm, True
    )
    total = int(out.sum() + half.sum() + ragged.sum() + blocks.sum() + masked.sum())
    for width, dtype in ((3001, jnp.float32), (6000, jnp.float32), (6000, jnp.bfloat16)):
        # Rows of one CTA narrower than its full layout (the short select's fewer tiles a lane).
        narrow = scores[:, :width].astype(dtype)
        total += int(
            topk_ffi.cuda_topk(
                narrow, jnp.array([1, 700, width]), 512, None, None, 8, "positions", algorithm
            ).sum()
        )
    if algorithm == "filter":
        # Fewer than k large keys, all where the row bar's sample looks: every chunk streams
        # again and the last to arrive merges. Then the same rows kept in clusters.
        trap = np.full((2, 1 << 17), -5.0, np.float32)
        trap[:, np.arange(0, 1 << 17, 32)[:400]] = 3.0
        for split in (True, False):
            total += int(
                topk_ffi.cuda_topk(
                    jnp.asarray(trap),
                    jnp.array([1 << 17, 99999]),
                    512,
                    None,
                    None,
                    8,
                    "positions",
                    "filter",
                    split,
                ).sum()
            )
    return total


def topc():
    picked = dj.select_candidate_blocks(
        scores[:, :16384], top_lens, num_candidates=2048, implementation="ffi"
    )
    return int(picked.sum())


def sparse():
    # The Hopper sparse logits kernel, a page id past the cache and -1 padding among its slots.
    bad_bt = dj.row_block_table(bt, 2).at[0, 0].set(batch * pages + 50)
    table = dj.sort_candidate_blocks(
        jnp.asarray(rng.integers(-3, 400, (6, 32)).astype(np.int32)),
        rows,
        bad_bt,
        implementation="ffi",
    )
    out = dj.sparse_paged_mqa_logits(
        q, cache, table, jnp.minimum(lens, pages * 64), bt, block_size=8, implementation="ffi"
    )
    return float(jnp.nansum(out[:, :8]))


def onchip():
    # The one-kernel sparse select (forced): clusters of 1 (6 rows of C 32) and 16 (a row of C
    # 2048), -1 padding and a page past the cache among the slots, lengths 0 to past the row.
    from dsv41_jax import _ext
    from dsv41_jax import fused as fused_layers

    _ext.require_gpu(fused_layers.SPARSE_SELECT)  # registers the targets (the ops do it too)
    total = 0
    for r, c, k in ((6, 32, 64), (1, 2048, 512)):
        physical = rng.integers(-1, batch * pages * 8 + 9, (r, c)).astype(np.int32)
        valid = np.array([0, 7, 64, c * 8 - 1, c * 8, c * 8 + 5] if r > 1 else [c * 8], np.int32)
        table = dj.CandidateTable(
            jnp.asarray(rng.integers(0, 1000, (r, c)).astype(np.int32)),
            jnp.zeros(r, jnp.int32),
            jnp.asarray(valid),
            jnp.asarray(physical),
            block_size=8,
        )
        qr = q if r == 6 else dj.QueryBundle(q.values[:1, :1], q.weights[:1, :1])
        out = fused_layers.sparse_select(
            qr, cache, table, fused_layers.SparseShared.of(table), k, "onchip"
        )
        total += int(out.sum())
    return total


def prefill():
    # Ragged rows (one past the buffer, one reversed, a partial last query block) under jit.
    t = 777
    keys = dj.quantize_keys(jnp.asarray(rng.standard_normal((t, 128)), jnp.float32))
    qp = dj.quantize_queries(
        jnp.asarray(rng.standard_normal((7, 1, 32, 128)), jnp.float32), jnp.ones((7, 1, 32))
    )
    s = jnp.array([0, 0, 5, 700, -3, 30, 776], jnp.int32)
    e = jnp.array([0, 1, 400, 900, 10, 20, 777], jnp.int32)
    out = jax.jit(lambda a, b: dj.mqa_logits(qp, keys, a, b, implementation="ffi"))(s, e)
    return float(jnp.where(jnp.isfinite(out), out, 0).sum())


def amax():
    x = jnp.asarray(rng.standard_normal((6, 4096)).astype(np.float32))
    out = dj.block_amax(x, rows, implementation="pallas")
    return float(jnp.where(jnp.isfinite(out), out, 0).sum())


def fused():
    # The fused layers under jit, one custom call a layer (lengths past the page table, a -1
    # page): the step with the top-C table and sparse consumers, the mask path, a plain layer,
    # and a step whose page table holds every block (no block scores).
    cfg = dj.IndexerConfig(index_topk=64, candidate_topk_blocks=32, next_n=2)
    total = 0
    for path, table_pages in (("auto", pages), ("mask", pages), ("auto", 4)):
        ix = dj.make_two_level_indexer(
            cfg, source_layer=20, consumer_layers=(24, 28, 32, 36), plain_layers=(1,), path=path
        )
        queries = dict.fromkeys(ix.layers, q)
        caches = dict.fromkeys(ix.layers, cache)
        out = jax.jit(ix.decode)(queries, caches, lens, bt[:, :table_pages])
        total += sum(int(x.sum()) for x in jax.tree.leaves(out))
    return total


SECTIONS = dict(
    logits=logits,
    sort=sort,
    physical=physical,
    topk=topk,
    filter=lambda: forced("filter"),
    short=lambda: forced("short"),
    topc=topc,
    sparse=sparse,
    onchip=onchip,
    prefill=prefill,
    amax=amax,
    fused=fused,
)

if __name__ == "__main__":
    names = sys.argv[1:] or list(SECTIONS)
    for name in names:
        print(f"sanitize run {name}: {SECTIONS[name]()}", flush=True)
    print("sanitize run done")
