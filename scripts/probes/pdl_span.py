"""The GPU span of back-to-back calls on the extension in PYTHONPATH, for programmatic dependent
launch A/Bs: per call, the span (first kernel start to last kernel end over 50 calls, / 50),
the kernel sum and the kernel count, from CUPTI, as the serving-loop bench measures them
(`dsv41_jax.bench.loop.measure`: medians over interleaved rounds). What it times:

- `chain`: 16 short selects (k = 512 over [1, 16K], each forced to the CUDA short select) in
  one jit, back to back on the stream: (span - sum) / kernels is the gap a kernel boundary costs
  (a kernel that starts early and waits counts its wait in its duration, so the span is the
  measure);
- `step graphs` / `step direct`: the decode step (publish + 4 selects) as one custom call,
  replayed as a CUDA graph / launched directly, at each shape.

    python scripts/probes/pdl_span.py TAG [bs8x128K,...]   # once per build, interleaved

Prints `SPAN TAG what shape span sum kernels` lines; `SAME` / `DIFF` lines check the chain
against the reference and the step's two modes against each other, with a digest of the step's
selections to compare across builds."""

import hashlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

import dsv41_jax as dj
from dsv41_jax import testing
from dsv41_jax.bench.args import parse_shapes
from dsv41_jax.bench.loop import LAYERS, measure

tag = sys.argv[1]
shapes = parse_shapes(sys.argv[2] if len(sys.argv) > 2 else "bs1x16K,bs8x128K")
rng = np.random.default_rng(0)


def report(what: str, shape: str, fn) -> None:
    m = measure({what: (fn, False)})[what]
    print(
        f"SPAN {tag} {what} {shape} {m['span']:.1f} {m['sum']:.1f} {m['kernels']:.0f}", flush=True
    )


# 16 selects back to back
s = testing.normal(rng, (1, 16384))
lens = jnp.full((1,), 16384 - 3, jnp.int32)


def chain(s, lens):
    return jnp.stack(
        [dj.topk(s + i, lens, 512, implementation="ffi", topk_algorithm="short") for i in range(16)]
    )


f = jax.jit(chain)
want = dj.topk(s, lens, 512, implementation="reference")
got = f(s, lens)
print("SAME" if all(bool((got[i] == want).all()) for i in range(16)) else "DIFF", tag, "chain")
report("chain", "[1, 16K]", lambda: f(s, lens))

cfg = dj.IndexerConfig()
for bs, ctx in shapes:
    name = f"bs{bs}x{ctx // 1024}K"
    caches, qs, lens_b, bt = testing.decode_inputs(
        rng, jax.random.key(7 + bs + ctx), bs, ctx, layers=5
    )
    qd, cd = dict(zip(LAYERS, qs)), dict(zip(LAYERS, caches))
    first = None
    for mode in ("graphs", "direct"):
        ix = dj.make_two_level_indexer(
            cfg, source_layer=20, consumer_layers=LAYERS[1:], step_mode=mode
        )
        step = jax.jit(ix.decode_stacked)
        out = np.asarray(step(qd, cd, lens_b, bt))
        if first is None:
            first = out
        digest = hashlib.md5(out.tobytes()).hexdigest()[:12]
        print("SAME" if (out == first).all() else "DIFF", tag, mode, name, digest, flush=True)
        report(f"step-{mode}", name, lambda step=step: step(qd, cd, lens_b, bt))
