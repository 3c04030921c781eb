"""The candidate source layer (`publish`, fused) on the extension in PYTHONPATH: kernel time per
call at V4.1's defaults beside its floor (the index cache read once at the copy bandwidth measured
now), the kernels behind it, and a digest of what it returns (its top-k and
the whole candidate table), so that two builds' runs show they published the same.

    python scripts/probes/publish_ab.py TAG [SHAPES]   # e.g. new 1x16K,8x128K,64x128K,8x1M

Run it once per build (PYTHONPATH naming each extension in turn) and interleave the runs."""

import hashlib
import sys

import jax
import numpy as np

import dsv41_jax as dj
from benchmarks import inputs, timing
from benchmarks.timing import jax_time_us

timing.BREAKDOWN_KERNELS = 8

tag = sys.argv[1]
shapes = (sys.argv[2] if len(sys.argv) > 2 else "1x16K,8x128K,64x128K").split(",")
cfg = dj.IndexerConfig()
rng = np.random.default_rng(0)
bw = timing.copy_bandwidth_gbs()
print(f"BW {tag} {bw:.0f} GB/s")
for shape in shapes:
    bs, ctx = shape.split("x")
    bs, context = int(bs), int(ctx[:-1]) * (1024 if ctx.endswith("K") else 1024 * 1024)
    caches, qs, lens, bt = inputs.decode_inputs(rng, jax.random.key(bs), bs, context, layers=2)
    sets = [(qs[0], caches[0], lens, bt), (qs[1], caches[1], lens, bt)]

    def pub(q, c, n, b):
        top, table = dj.publish(q, c, n, b, cfg)
        return top, table.blocks, table.count, table.valid_lens, table.physical

    out = jax.jit(pub)(*sets[0])
    digest = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in out)).hexdigest()[:16]
    kernels: list[str] = []
    t = jax_time_us(pub, sets, calls=40, breakdown=kernels)
    floor = bs * context * 132 / (bw * 1e3)  # the layer's index cache read once
    print(f"TIME {tag} bs{bs} x {ctx} publish {t:.1f} floor {floor:.1f} digest {digest}")
    for line in kernels:
        print(f"  {tag} {shape} {line}")
