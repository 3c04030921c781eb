"""How the SM90 sparse consumer's two forms compare, by batch, on the extension in PYTHONPATH:
the sparse logits kernel alone, then `select(path="sparse")` with the short select forced
(logits, select, column map) and with the one kernel forced ("onchip"), kernel time per call,
at V4.1's defaults over a 128K context, and whether both forms select the same positions.

    python scripts/probes/sparse_select_ab.py TAG [BATCHES]   # e.g. new 1,8,64,128

Run it once per build (PYTHONPATH naming each extension in turn) and interleave the runs."""

import sys

import jax
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs
from benchmarks.timing import jax_time_us
from dsv41_jax import _ext
from dsv41_jax.logits import ffi as logits_ffi

tag = sys.argv[1]
batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "8,64").split(",")]
cfg = dj.IndexerConfig()
rng = np.random.default_rng(0)
for bs in batches:
    caches, qs, lens, bt = inputs.decode_inputs(rng, jax.random.key(bs), bs, 131072, layers=2)
    _, table = jax.jit(lambda q, c, n, b: dj.publish(q, c, n, b, cfg))(qs[0], caches[0], lens, bt)
    sets = [(qs[1], caches[1], table), (qs[0], caches[0], table)]
    t = jax_time_us(
        lambda q, c, tb: logits_ffi.sparse_paged_mqa_logits_sm90(q, c, tb, 8), sets, calls=40
    )
    print(f"TIME {tag} bs{bs} logits {t:.1f}")
    select_sets = [(qs[1], caches[1], lens, bt, table), (qs[0], caches[0], lens, bt, table)]
    got = {}
    for algorithm in ("short", "onchip"):

        def sel(*a, forced=algorithm):
            return dj.select(*a, cfg, path="sparse", topk_algorithm=forced)

        got[algorithm] = np.asarray(jax.jit(sel)(*select_sets[0]))
        t = jax_time_us(sel, select_sets)
        print(f"TIME {tag} bs{bs} select-{algorithm} {t:.1f}")
    cl = _ext.extension().sparse_select_cluster_size(bs, cfg.candidate_topk_blocks)
    print(f"bs{bs}: one kernel in clusters of {cl}; same selection:", end=" ")
    print(np.array_equal(got["short"], got["onchip"]))
